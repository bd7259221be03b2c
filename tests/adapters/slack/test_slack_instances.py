"""Socket Mode with several instances on one database: one connection at a
time (the elected leader's); when it goes, another instance connects."""

from __future__ import annotations

from tests.fakes.slack import FakeSlack
from tests.waiting import wait_until

pytest_plugins = ("tests.adapters.slack.fixtures",)


async def test_only_the_leader_connects_and_another_takes_over(rig_factory, slack: FakeSlack):
    first = await rig_factory("socket")
    second = await rig_factory("socket")
    assert first.adapter._socket is not None  # elected at start, connected before start returned
    assert second.adapter._socket is None  # standing by
    opened = len(slack.calls_to("apps.connections.open"))

    await first.close()  # the leader goes away
    await wait_until(lambda: second.adapter._socket is not None, seconds=20)
    assert len(slack.calls_to("apps.connections.open")) > opened
