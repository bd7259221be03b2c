"""The wording of provider failures (`bot.llm.failures`): what the real
provider raises against the fake Messages API carries where the call went,
and each kind of failure says what to do, never a secret."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from bot.errors import (
    ContextWindowExceeded,
    ModelNotFound,
    Overloaded,
    ProviderAuthError,
    ProviderBadRequest,
    ProviderEndpoint,
    ProviderError,
    ProviderRateLimited,
    ProviderUnavailable,
    ProviderUnreachable,
)
from bot.llm.anthropic import AnthropicProvider
from bot.llm.failures import explain, public_url
from bot.llm.types import ChatMessage, LLMRequest, TextBlock
from tests.fakes.anthropic import FakeAnthropic, http_error
from tests.service_rig import free_port

KEY = "sk-ant-secret-0000"
HERE = ProviderEndpoint("http://127.0.0.1:8000", "llm.base_url", "ANTHROPIC_API_KEY")


def request(model: str) -> LLMRequest:
    return LLMRequest(model=model, messages=(ChatMessage("user", (TextBlock("hi"),)),))


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic(models=["claude-sonnet-5-5"]) as server:
        yield server


async def failure(base_url: str, model: str = "claude-sonnet-5-5", **options: str) -> ProviderError:
    """What the real provider raises for one call."""
    provider = AnthropicProvider(api_key=KEY, base_url=base_url, max_retries=0, **options)
    try:
        with pytest.raises(ProviderError) as info:
            await provider.complete(request(model))
    finally:
        await provider.aclose()
    return info.value


async def test_an_unknown_model_is_model_not_found_with_where_the_call_went(
    fake: FakeAnthropic,
) -> None:
    error = await failure(fake.base_url, "claude-nope")
    assert isinstance(error, ModelNotFound)
    assert (error.model, error.status) == ("claude-nope", 404)
    assert error.endpoint == ProviderEndpoint(
        fake.base_url.rstrip("/"), "llm.base_url", "ANTHROPIC_API_KEY"
    )
    text = explain(error, "[llm] model")
    assert 'no model called "claude-nope"' in text and "It is set in [llm] model" in text


async def test_a_404_that_is_not_about_a_model_points_at_the_url(fake: FakeAnthropic) -> None:
    fake.script(http_error(404, "Not Found"))
    error = await failure(fake.base_url)
    assert isinstance(error, ProviderBadRequest) and not isinstance(error, ModelNotFound)
    assert f"no AI service API at {fake.base_url.rstrip('/')}" in explain(error)


async def test_unreachable_names_the_url_the_sdk_tried_and_the_setting() -> None:
    url = f"http://user:pw@127.0.0.1:{free_port()}/v0?token=x"
    error = await failure(url, url_setting="ANTHROPIC_BASE_URL")
    assert isinstance(error, ProviderUnreachable) and error.endpoint is not None
    text = explain(error)
    assert f"at {error.endpoint.url}." in text and "set ANTHROPIC_BASE_URL" in text
    assert "pw" not in text and "token" not in text and KEY not in text


def placed(error: ProviderError, status: int | None = None) -> ProviderError:
    error.endpoint, error.model, error.status = HERE, "claude-x", status
    return error


@pytest.mark.parametrize(
    ("error", "says", "try_again"),
    [
        (placed(ProviderAuthError("401"), 401), "rejected the API key (401)", False),
        (placed(ProviderAuthError("403"), 403), "does not let the API key do this", False),
        (placed(ProviderAuthError("402"), 402), "billing problem", False),
        (placed(ProviderAuthError("no key")), "no usable API key", False),
        (placed(ProviderUnreachable("refused")), "at http://127.0.0.1:8000.", False),
        (placed(ModelNotFound("404"), 404), '"claude-x"', False),
        (placed(ContextWindowExceeded("long"), 400), "Send /new", False),
        (placed(ProviderBadRequest("bad"), 400), "refused the request (400)", False),
        (placed(ProviderRateLimited("429", None), 429), "limiting how often", True),
        (placed(Overloaded("529", 2.0), 529), "overloaded", True),
        (placed(ProviderUnavailable("500"), 500), "failed to answer just now (500)", True),
        (placed(ProviderError("?")), "couldn't get an answer", True),
    ],
)
def test_each_failure_says_what_to_do(error: ProviderError, says: str, try_again: bool) -> None:
    text = explain(error)
    assert says in text
    assert ("try again" in text.lower()) is try_again
    if isinstance(error, ProviderAuthError):
        assert "the environment variable ANTHROPIC_API_KEY" in text


def test_a_failure_raised_before_any_call_still_names_the_key() -> None:
    text = explain(ProviderAuthError("no key"))  # no endpoint: raised at construction
    assert "ANTHROPIC_API_KEY" in text


@pytest.mark.parametrize(
    ("seconds", "wait"),
    [(None, "in a moment"), (3, "in a moment"), (29.2, "about 30 seconds"), (600, "10 minutes")],
)
def test_try_again_says_how_long_when_the_api_does(seconds: float | None, wait: str) -> None:
    assert wait in explain(placed(ProviderRateLimited("429", seconds), 429))


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://api.anthropic.com", "https://api.anthropic.com"),
        ("http://u:p@10.0.0.2:11434/v1/?key=k#x", "http://10.0.0.2:11434/v1"),
        ("http://[::1]:8080/", "http://[::1]:8080"),
    ],
)
def test_public_url_drops_credentials_query_and_fragment(url: str, shown: str) -> None:
    assert public_url(url) == shown
