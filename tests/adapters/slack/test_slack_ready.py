"""The Slack adapter's readiness (`GET /readyz` of the App's web server): HTTP
mode is ready once started; Socket Mode once its WebSocket is connected; a
stopped adapter is not."""

from __future__ import annotations

from typing import Any

import pytest

pytest_plugins = ("tests.adapters.slack.fixtures",)


@pytest.mark.parametrize("mode", ["http", "socket"])
async def test_readyz_is_200_once_slack_is_connected(rig_factory: Any, mode: str) -> None:
    rig = await rig_factory(mode)
    async with rig.http.get(rig.url + "/readyz") as response:
        assert response.status == 200
        assert await response.json() == {
            "ready": True,
            "database": "ok",
            "adapters": {"slack": "ok"},
        }
    await rig.adapter.stop()
    assert await rig.adapter.ready() is False
    async with rig.http.get(rig.url + "/readyz") as response:
        assert response.status == 503
        assert (await response.json())["adapters"] == {"slack": "not connected"}
