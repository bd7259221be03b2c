"""AnthropicProvider through the real `anthropic` SDK against tests.fakes.anthropic."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from bot.errors import (
    ContextWindowExceeded,
    Overloaded,
    ProviderAuthError,
    ProviderBadRequest,
    ProviderError,
    ProviderRateLimited,
    ProviderUnavailable,
)
from bot.llm.anthropic import AnthropicProvider, build_params
from bot.llm.types import (
    ChatMessage,
    ImageBlock,
    LLMRequest,
    SystemBlock,
    TextBlock,
    ToolResultBlock,
    ToolSpec,
    ToolUseBlock,
)
from tests.fakes.anthropic import (
    FakeAnthropic,
    FakeUsage,
    bad_request,
    http_error,
    overloaded_error,
    prompt_too_long,
    rate_limit_error,
    server_error,
    stream_error,
    text_reply,
    tool_call,
    tool_use_reply,
    truncated_stream,
)
from tests.service_rig import free_port

KEY = "sk-ant-test-SECRET-0123456789"
MODEL = "claude-test-model"


def user(*blocks: Any) -> ChatMessage:
    return ChatMessage("user", tuple(TextBlock(b) if isinstance(b, str) else b for b in blocks))


def assistant(*blocks: Any) -> ChatMessage:
    return ChatMessage(
        "assistant", tuple(TextBlock(b) if isinstance(b, str) else b for b in blocks)
    )


def req(*messages: ChatMessage, **kwargs: Any) -> LLMRequest:
    return LLMRequest(model=MODEL, messages=messages or (user("hi"),), **kwargs)


def tool(name: str) -> ToolSpec:
    return ToolSpec(name, f"the {name} tool", {"type": "object", "properties": {}})


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic() as server:
        yield server


@pytest.fixture
async def provider(fake: FakeAnthropic) -> AsyncIterator[AnthropicProvider]:
    p = AnthropicProvider(api_key=KEY, base_url=fake.base_url, max_retries=0)
    yield p
    await p.aclose()


# --- happy paths ---------------------------------------------------------------------------


async def test_text_reply_streams_chunks(fake: FakeAnthropic, provider: AnthropicProvider) -> None:
    fake.script(text_reply("Hello from the streaming fake!", chunk_size=5))
    chunks: list[str] = []

    async def on_text(delta: str) -> None:
        chunks.append(delta)

    response = await provider.complete(req(user("hello"), max_tokens=321, cache=False), on_text)

    assert response.text == "Hello from the streaming fake!"
    assert len(chunks) > 3 and "".join(chunks) == response.text
    assert response.stop_reason == "end_turn"
    assert response.model == MODEL
    assert response.usage.input_tokens > 0 and response.usage.output_tokens > 0
    sent = fake.last_request
    assert sent.path == "/v1/messages" and sent.stream
    assert sent.api_key == KEY
    assert sent.model == MODEL and sent.body["max_tokens"] == 321
    assert sent.messages == [{"role": "user", "content": [{"type": "text", "text": "hello"}]}]
    assert "temperature" not in sent.body and "system" not in sent.body


async def test_default_responder_echoes(fake: FakeAnthropic, provider: AnthropicProvider) -> None:
    response = await provider.complete(req(user("ping?")))
    assert response.text == "echo: ping?"
    assert fake.pending == 0 and fake.request_count == 1


@pytest.mark.parametrize(
    "stop", ["max_tokens", "refusal", "pause_turn", "model_context_window_exceeded"]
)
async def test_stop_reasons_pass_through(
    fake: FakeAnthropic, provider: AnthropicProvider, stop: str
) -> None:
    fake.script(text_reply("partial", stop_reason=stop))
    assert (await provider.complete(req())).stop_reason == stop


async def test_temperature_sent_only_when_set(
    fake: FakeAnthropic, provider: AnthropicProvider
) -> None:
    await provider.complete(req(temperature=0.3))
    assert fake.last_request.body["temperature"] == 0.3


async def test_tool_use_round_trip(fake: FakeAnthropic, provider: AnthropicProvider) -> None:
    call_a = tool_call("search", {"query": "weather in Paris", "filters": {"days": [1, 2, 3]}})
    call_b = tool_call("clock", {"tz": "Europe/Paris"}, id="toolu_fixed")
    fake.script(tool_use_reply(call_a, call_b, text="Let me look.", chunk_size=4), "All done.")
    chunks: list[str] = []

    async def on_text(delta: str) -> None:
        chunks.append(delta)

    request = req(user("weather?"), tools=(tool("search"), tool("clock")))
    first = await provider.complete(request, on_text)

    assert first.stop_reason == "tool_use"
    assert first.text == "Let me look." == "".join(chunks)
    uses = first.tool_uses
    assert [u.id for u in uses] == [call_a["id"], "toolu_fixed"]
    assert uses[0].id.startswith("toolu_")
    assert uses[0].name == "search" and uses[0].input == call_a["input"]
    assert uses[1].input == {"tz": "Europe/Paris"}

    history = (
        user("weather?"),
        ChatMessage("assistant", first.content),
        user(ToolResultBlock(uses[0].id, "sunny"), ToolResultBlock(uses[1].id, "12:00")),
    )
    second = await provider.complete(req(*history, tools=request.tools))

    assert second.text == "All done."
    sent = fake.last_request
    assert sent.status == 200
    assert sent.messages[1]["content"][1] == {
        "type": "tool_use",
        "id": call_a["id"],
        "name": "search",
        "input": call_a["input"],
    }
    results = sent.messages[2]["content"]
    assert [r["tool_use_id"] for r in results] == [call_a["id"], "toolu_fixed"]
    assert all("is_error" not in r for r in results)


async def test_tool_result_error_flag(fake: FakeAnthropic, provider: AnthropicProvider) -> None:
    use = ToolUseBlock("toolu_1", "clock", {})
    history = (
        user("time?"),
        assistant(use),
        user(ToolResultBlock("toolu_1", "boom", is_error=True)),
    )
    await provider.complete(req(*history, cache=False, tools=(tool("clock"),)))
    assert fake.last_request.messages[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "boom", "is_error": True}
    ]


async def test_image_block_mapping(fake: FakeAnthropic, provider: AnthropicProvider) -> None:
    image = ImageBlock("image/png", "iVBORw0KGgo=")
    await provider.complete(req(user(image, "what is this?"), cache=False))
    assert fake.last_request.messages[0]["content"] == [
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
        },
        {"type": "text", "text": "what is this?"},
    ]


async def test_unsupported_image_type_is_bad_request(provider: AnthropicProvider) -> None:
    with pytest.raises(ProviderBadRequest, match="image/bmp"):
        await provider.complete(req(user(ImageBlock("image/bmp", "AAAA"))))


async def test_usage_with_cache_fields(fake: FakeAnthropic, provider: AnthropicProvider) -> None:
    usage = FakeUsage(
        input_tokens=11,
        output_tokens=22,
        cache_creation_input_tokens=33,
        cache_read_input_tokens=44,
    )
    fake.script(text_reply("cached", usage=usage))
    response = await provider.complete(req())
    assert response.usage.input_tokens == 11
    assert response.usage.output_tokens == 22
    assert response.usage.cache_write_tokens == 33
    assert response.usage.cache_read_tokens == 44


# --- prompt caching ------------------------------------------------------------------------


async def test_cache_breakpoints_on_tools_system_and_last_message(
    fake: FakeAnthropic, provider: AnthropicProvider
) -> None:
    request = req(
        user("first"),
        assistant("reply"),
        user("second", "last block"),
        system=(
            SystemBlock("persona", cache=True),
            SystemBlock("rules", cache=True),
            SystemBlock("now"),
        ),
        tools=(tool("a"), tool("b"), tool("c")),
    )
    await provider.complete(request)
    sent = fake.last_request
    assert sent.cache_breakpoints == [
        "tools.2",
        "system.0",
        "system.1",
        "messages.2.content.1",
    ]
    assert sent.tools[2]["cache_control"] == {"type": "ephemeral"}
    assert sent.system[1] == {
        "type": "text",
        "text": "rules",
        "cache_control": {"type": "ephemeral"},
    }
    assert "cache_control" not in sent.system[2]


async def test_cache_unmarked_system_uses_last_block(
    fake: FakeAnthropic, provider: AnthropicProvider
) -> None:
    await provider.complete(req(system=(SystemBlock("one"), SystemBlock("two"))))
    assert fake.last_request.cache_breakpoints == ["system.1", "messages.0.content.0"]


async def test_cache_never_more_than_four_breakpoints(
    fake: FakeAnthropic, provider: AnthropicProvider
) -> None:
    system = tuple(SystemBlock(f"section {i}", cache=True) for i in range(5))
    await provider.complete(req(system=system, tools=(tool("a"),)))
    sent = fake.last_request
    assert sent.status == 200
    assert sent.cache_breakpoints == ["tools.0", "system.3", "system.4", "messages.0.content.0"]


async def test_cache_skips_blank_text(fake: FakeAnthropic, provider: AnthropicProvider) -> None:
    system = (SystemBlock("real", cache=False), SystemBlock("  ", cache=True))
    await provider.complete(req(user("question", ""), system=system))
    sent = fake.last_request
    assert sent.status == 200
    assert sent.system == [{"type": "text", "text": "real", "cache_control": {"type": "ephemeral"}}]
    assert sent.messages[0]["content"] == [
        {"type": "text", "text": "question", "cache_control": {"type": "ephemeral"}}
    ]


async def test_cache_off_sends_no_breakpoints(
    fake: FakeAnthropic, provider: AnthropicProvider
) -> None:
    request = req(system=(SystemBlock("s", cache=True),), tools=(tool("a"),), cache=False)
    await provider.complete(request)
    assert fake.last_request.cache_breakpoints == []


def test_build_params_is_pure() -> None:
    params = build_params(req(user("x"), tools=(tool("a"),)))
    assert params.tools[0]["cache_control"] == {"type": "ephemeral"}
    assert params.extra_body == {}


# --- errors --------------------------------------------------------------------------------


async def test_rate_limit_retried_then_success(fake: FakeAnthropic) -> None:
    fake.script(rate_limit_error(retry_after=0.01), text_reply("after the wait"))
    p = AnthropicProvider(api_key=KEY, base_url=fake.base_url, max_retries=1)
    try:
        response = await p.complete(req())
    finally:
        await p.aclose()
    assert response.text == "after the wait"
    assert fake.request_count == 2
    assert [r.status for r in fake.requests] == [429, 200]


async def test_rate_limit_maps_retry_after(
    fake: FakeAnthropic, provider: AnthropicProvider
) -> None:
    fake.script(rate_limit_error(retry_after=7))
    with pytest.raises(ProviderRateLimited) as info:
        await provider.complete(req())
    assert info.value.retry_after == 7.0
    assert info.value.retryable
    assert "429" in str(info.value) and "rate_limit_error" in str(info.value)


async def test_rate_limit_without_header(fake: FakeAnthropic, provider: AnthropicProvider) -> None:
    fake.script(rate_limit_error(retry_after=None))
    with pytest.raises(ProviderRateLimited) as info:
        await provider.complete(req())
    assert info.value.retry_after is None


async def test_overloaded_after_retries_exhausted(fake: FakeAnthropic) -> None:
    fake.script(overloaded_error(retry_after=0.01), overloaded_error(retry_after=0.02))
    p = AnthropicProvider(api_key=KEY, base_url=fake.base_url, max_retries=1)
    try:
        with pytest.raises(Overloaded) as info:
            await p.complete(req())
    finally:
        await p.aclose()
    assert fake.request_count == 2
    assert info.value.retry_after == pytest.approx(0.02)
    assert "overloaded_error" in str(info.value)


async def test_wrong_key_is_auth_error(fake: FakeAnthropic) -> None:
    fake.expected_api_key = "sk-the-right-one"
    p = AnthropicProvider(api_key=KEY, base_url=fake.base_url, max_retries=0)
    try:
        with pytest.raises(ProviderAuthError) as info:
            await p.complete(req())
    finally:
        await p.aclose()
    assert "401" in str(info.value) and "authentication_error" in str(info.value)
    assert KEY not in str(info.value)


async def test_permission_error_is_auth_error(
    fake: FakeAnthropic, provider: AnthropicProvider
) -> None:
    fake.script(http_error(403, "not allowed"))
    with pytest.raises(ProviderAuthError, match="permission_error"):
        await provider.complete(req())


async def test_prompt_too_long_is_context_window(
    fake: FakeAnthropic, provider: AnthropicProvider
) -> None:
    fake.script(prompt_too_long())
    with pytest.raises(ContextWindowExceeded, match="prompt is too long"):
        await provider.complete(req())


@pytest.mark.parametrize("status", [400, 404, 413, 422])
async def test_other_client_errors_are_bad_request(
    fake: FakeAnthropic, provider: AnthropicProvider, status: int
) -> None:
    fake.script(http_error(status, "something is off"))
    with pytest.raises(ProviderBadRequest) as info:
        await provider.complete(req())
    assert not isinstance(info.value, ContextWindowExceeded)
    assert not info.value.retryable


async def test_server_error_is_unavailable(
    fake: FakeAnthropic, provider: AnthropicProvider
) -> None:
    fake.script(server_error())
    with pytest.raises(ProviderUnavailable, match="500 api_error"):
        await provider.complete(req())


@pytest.mark.parametrize(
    ("error_type", "expected"),
    [
        ("overloaded_error", Overloaded),
        ("rate_limit_error", ProviderRateLimited),
        ("api_error", ProviderUnavailable),
    ],
)
async def test_mid_stream_error_event(
    fake: FakeAnthropic, provider: AnthropicProvider, error_type: str, expected: type[Exception]
) -> None:
    fake.script(stream_error(error_type, "stream broke", partial_text="Half an ans"))
    chunks: list[str] = []

    async def on_text(delta: str) -> None:
        chunks.append(delta)

    with pytest.raises(expected) as info:
        await provider.complete(req(), on_text)
    assert "".join(chunks) == "Half an ans"
    assert "stream broke" in str(info.value)
    assert info.value.__cause__ is not None


async def test_truncated_stream_is_unavailable(
    fake: FakeAnthropic, provider: AnthropicProvider
) -> None:
    fake.script(truncated_stream("cut o"))
    with pytest.raises(ProviderUnavailable, match="ended before"):
        await provider.complete(req())


async def test_dropped_connection_is_unavailable(
    fake: FakeAnthropic, provider: AnthropicProvider
) -> None:
    fake.script(truncated_stream("cut o", abort=True))
    with pytest.raises(ProviderUnavailable) as info:
        await provider.complete(req())
    assert info.value.retryable
    assert (await provider.complete(req(user("still there?")))).text == "echo: still there?"


async def test_connection_refused_is_unavailable() -> None:
    port = free_port()  # nothing listens there
    p = AnthropicProvider(api_key=KEY, base_url=f"http://127.0.0.1:{port}", max_retries=0)
    try:
        with pytest.raises(ProviderUnavailable) as info:
            await p.complete(req())
    finally:
        await p.aclose()
    assert KEY not in str(info.value)


async def test_request_timeout_is_unavailable(
    fake: FakeAnthropic, provider: AnthropicProvider
) -> None:
    fake.script(text_reply("too late", delay=2.0))
    with pytest.raises(ProviderUnavailable, match="timed out"):
        await provider.complete(req(timeout=0.2))


async def test_cancel_while_waiting(fake: FakeAnthropic, provider: AnthropicProvider) -> None:
    fake.script(text_reply("never", delay=5.0))
    task = asyncio.create_task(provider.complete(req()))
    await fake.wait_for_requests(1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert (await provider.complete(req(user("again")))).text == "echo: again"


@pytest.mark.parametrize(
    "reply",
    [
        rate_limit_error(retry_after=1),
        overloaded_error(),
        http_error(401, f"bad key {KEY}"),
        bad_request(f"echoing {KEY}"),
        server_error(),
        stream_error("overloaded_error", f"leaky {KEY}"),
    ],
)
async def test_key_never_in_error_messages(fake: FakeAnthropic, reply: Any) -> None:
    fake.script(reply)
    p = AnthropicProvider(api_key=KEY, base_url=fake.base_url, max_retries=0)
    try:
        with pytest.raises(ProviderError) as info:
            await p.complete(req())
    finally:
        await p.aclose()
    assert KEY not in str(info.value)
    assert KEY not in repr(info.value)


async def test_missing_credentials(
    fake: FakeAnthropic, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    for var in ("API_KEY", "AUTH_TOKEN", "PROFILE", "CONFIG_DIR", "IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(f"ANTHROPIC_{var}", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no credentials profile on disk
    p = AnthropicProvider(api_key=None, base_url=fake.base_url)
    try:
        with pytest.raises(ProviderAuthError, match="no Anthropic API key"):
            await p.complete(req())
    finally:
        await p.aclose()
    assert fake.request_count == 0


async def test_broken_credentials_profile(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    for var in ("API_KEY", "AUTH_TOKEN", "PROFILE"):
        monkeypatch.delenv(f"ANTHROPIC_{var}", raising=False)
    monkeypatch.setenv("ANTHROPIC_CONFIG_DIR", str(tmp_path))  # set, but holds no profile
    with pytest.raises(ProviderAuthError, match="credentials could not be loaded"):
        AnthropicProvider(api_key=None)


async def test_env_key_and_base_url_apply_when_not_given(
    fake: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-from-env")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.base_url)
    p = AnthropicProvider(api_key=None)
    try:
        assert (await p.complete(req(user("env")))).text == "echo: env"
    finally:
        await p.aclose()
    assert fake.last_request.api_key == "sk-from-env"


# --- the fake validates like the API ---------------------------------------------------------


async def test_fake_rejects_orphan_tool_result(
    fake: FakeAnthropic, provider: AnthropicProvider
) -> None:
    history = (user("hi"), assistant("no tools here"), user(ToolResultBlock("toolu_ghost", "x")))
    with pytest.raises(ProviderBadRequest, match="toolu_ghost"):
        await provider.complete(req(*history))
    assert fake.last_request.status == 400
    assert fake.pending == 0


async def test_fake_rejects_unanswered_tool_use(
    fake: FakeAnthropic, provider: AnthropicProvider
) -> None:
    fake.script("kept for the next valid request")
    use = ToolUseBlock("toolu_open", "clock", {})
    with pytest.raises(ProviderBadRequest, match="without `tool_result`"):
        await provider.complete(req(user("hi"), assistant(use), user("and?")))
    assert fake.pending == 1  # a rejected request does not consume the script


async def post(fake: FakeAnthropic, path: str, body: Any, key: str | None = KEY) -> tuple[int, Any]:
    headers = {"x-api-key": key} if key else {}
    async with (
        aiohttp.ClientSession() as session,
        session.post(fake.base_url + path, json=body, headers=headers) as resp,
    ):
        assert resp.headers["request-id"].startswith("req_")
        return resp.status, await resp.json()


GOOD: dict[str, Any] = {
    "model": MODEL,
    "max_tokens": 100,
    "messages": [{"role": "user", "content": "hello"}],
}


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"model": None}, "model"),
        ({"max_tokens": None}, "max_tokens"),
        ({"messages": []}, "at least one message"),
        ({"messages": [{"role": "assistant", "content": "hi"}]}, "first message"),
        (
            {
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "a"}]},
                    {"role": "assistant", "content": [tool_call("t", id="toolu_x")]},
                    {"role": "user", "content": [{"type": "text", "text": "b"}]},
                ]
            },
            "toolu_x",
        ),
        (
            {
                "system": [
                    {"type": "text", "text": f"s{i}", "cache_control": {"type": "ephemeral"}}
                    for i in range(5)
                ]
            },
            "maximum of 4 blocks",
        ),
    ],
)
async def test_fake_validation(fake: FakeAnthropic, change: dict[str, Any], fragment: str) -> None:
    body = {k: v for k, v in {**GOOD, **change}.items() if v is not None}
    status, answer = await post(fake, "/v1/messages", body)
    assert status == 400
    assert answer["type"] == "error"
    assert answer["error"]["type"] == "invalid_request_error"
    assert fragment in answer["error"]["message"]


async def test_fake_requires_a_key(fake: FakeAnthropic) -> None:
    status, answer = await post(fake, "/v1/messages", GOOD, key=None)
    assert status == 401
    assert answer["error"]["type"] == "authentication_error"


async def test_fake_json_mode_and_count_tokens(fake: FakeAnthropic) -> None:
    fake.script(tool_use_reply(("clock", {"tz": "UTC"}), usage=FakeUsage(input_tokens=5)))
    status, message = await post(fake, "/v1/messages", GOOD)
    assert status == 200
    assert message["type"] == "message" and message["stop_reason"] == "tool_use"
    assert message["content"][0]["input"] == {"tz": "UTC"}
    assert message["usage"]["input_tokens"] == 5 and message["usage"]["output_tokens"] > 0
    status, counted = await post(
        fake, "/v1/messages/count_tokens", {"model": MODEL, "messages": GOOD["messages"]}
    )
    assert status == 200 and counted["input_tokens"] > 0


async def test_fake_in_a_thread() -> None:
    fake = FakeAnthropic.start_in_thread()
    try:
        fake.script("from the thread")
        p = AnthropicProvider(api_key=KEY, base_url=fake.base_url, max_retries=0)
        try:
            assert (await p.complete(req())).text == "from the thread"
        finally:
            await p.aclose()
        assert fake.request_count == 1
    finally:
        fake.stop()


@pytest.mark.slow  # a full garbage collection of the worker's heap
def test_the_stream_snapshot_type_stays_cached_across_garbage_collections() -> None:
    """The SDK parametrises ParsedMessage at every streamed message start;
    pydantic caches that class weakly. Pinned, a collection doesn't free it, so
    it is not rebuilt (~1.5 ms) on the next call."""
    import gc

    from anthropic.lib._parse._response import ResponseFormatT
    from anthropic.types.parsed_message import ParsedMessage

    from bot.llm import anthropic as provider

    assert provider._STREAM_SNAPSHOT_TYPE is not None
    gc.collect()
    assert ParsedMessage[ResponseFormatT] is provider._STREAM_SNAPSHOT_TYPE


def test_a_tool_result_with_images() -> None:
    image = ImageBlock("image/png", "iVBORw0KGgo=")
    request = LLMRequest(
        model="m",
        messages=(
            ChatMessage("user", (TextBlock("show me"),)),
            ChatMessage("assistant", (ToolUseBlock("t1", "picture", {}),)),
            ChatMessage("user", (ToolResultBlock("t1", "[Image 1: image/png]", images=(image,)),)),
        ),
        tools=(ToolSpec("picture", "a picture", {"type": "object", "properties": {}}),),
        cache=False,
    )
    (result,) = build_params(request).messages[-1]["content"]
    assert result == {  # type: ignore[comparison-overlap]
        "type": "tool_result",
        "tool_use_id": "t1",
        "content": [
            {"type": "text", "text": "[Image 1: image/png]"},
            {
                "type": "image",
                "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
            },
        ],
    }
