"""Reading the real service's `/metrics` and `/readyz` in tests."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from tests.service_rig import Service

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    """Every sample: (name, its labels) → value."""
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    """One sample's value (0 when it is not there yet)."""
    return samples.get((name, frozenset(labels.items())), 0.0)


def label_values(samples: Samples) -> set[str]:
    return {v for _, labels in samples for _, v in labels}


async def scrape(http: aiohttp.ClientSession, service: Service) -> tuple[str, Samples]:
    async with http.get(service.url + "/metrics") as response:
        assert response.status == 200, await response.text()
        assert response.content_type == "text/plain"
        text = await response.text()
    return text, parse(text)


async def scrape_until(
    http: aiohttp.ClientSession,
    service: Service,
    done: Callable[[Samples], bool],
    what: str,
    within: float = 60.0,
) -> tuple[str, Samples]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        text, samples = await scrape(http, service)
        if done(samples):
            return text, samples
        if loop.time() > deadline:
            raise AssertionError(f"/metrics never showed {what}:\n{text}\n{service.log_text}")
        await asyncio.sleep(0.1)


async def readyz(http: aiohttp.ClientSession, service: Service) -> tuple[int, dict[str, Any]]:
    async with http.get(service.url + "/readyz") as response:
        body: dict[str, Any] = await response.json()
        return response.status, body


async def readyz_until(
    http: aiohttp.ClientSession,
    service: Service,
    status: int,
    what: str,
    within: float = 60.0,
) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        got, body = await readyz(http, service)
        if got == status:
            return body
        if loop.time() > deadline:
            raise AssertionError(f"/readyz never answered {status} ({what}): {got} {body}")
        await asyncio.sleep(0.1)
