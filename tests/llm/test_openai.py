"""The `openai` kind against the fake Chat Completions API, through the real
SDK: what our neutral request becomes on the wire, the streamed reply put
back together, and each failure as our error."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from bot.errors import (
    ContextWindowExceeded,
    Overloaded,
    ProviderAuthError,
    ProviderBadRequest,
    ProviderRateLimited,
    ProviderUnavailable,
)
from bot.llm.openai import OpenAIProvider
from bot.llm.types import (
    ChatMessage,
    DocumentBlock,
    ImageBlock,
    LLMRequest,
    SystemBlock,
    TextBlock,
    ToolResultBlock,
    ToolSpec,
    ToolUseBlock,
)
from tests.fakes.openai_chat import ChatReply, FakeOpenAI, ToolCall, chat_error

KEY = "sk-openai-test"


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(api_keys={KEY}) as server:
        yield server


@pytest.fixture
async def provider(fake: FakeOpenAI) -> AsyncIterator[OpenAIProvider]:
    made = OpenAIProvider(label="local", api_key=KEY, base_url=fake.base_url, max_retries=0)
    yield made
    await made.aclose()


def ask(*messages: ChatMessage, **fields: object) -> LLMRequest:
    return LLMRequest(model="m", messages=messages, **fields)  # type: ignore[arg-type]


async def test_the_request_on_the_wire(fake: FakeOpenAI, provider: OpenAIProvider) -> None:
    image = ImageBlock("image/png", "aGVsbG8=")
    pdf = DocumentBlock("application/pdf", "JVBERi0=", name="a.pdf", text="the PDF's text")
    history = (
        ChatMessage("user", (TextBlock("look"), image, pdf)),
        ChatMessage(
            "assistant", (TextBlock("Checking."), ToolUseBlock("c1", "clock", {"tz": "UTC"}))
        ),
        ChatMessage("user", (ToolResultBlock("c1", "boom", is_error=True, images=(image,)),)),
    )
    tools = (ToolSpec("clock", "The time.", {"type": "object"}),)
    system = (SystemBlock("You help."), SystemBlock("Be brief."))
    await provider.complete(
        ask(*history, system=system, tools=tools, volatile="Now: noon", temperature=0.2)
    )

    body = fake.requests[0].json
    assert body["max_tokens"] == 4096 and body["temperature"] == 0.2
    assert body["messages"][0] == {"role": "system", "content": "You help.\n\nBe brief."}
    user = body["messages"][1]["content"]
    assert user[1] == {"type": "image_url", "image_url": {"url": "data:image/png;base64,aGVsbG8="}}
    assert "the PDF's text" in user[2]["text"]
    assert body["messages"][2]["tool_calls"][0]["function"] == {
        "name": "clock",
        "arguments": '{"tz": "UTC"}',
    }
    assert body["messages"][3] == {"role": "tool", "tool_call_id": "c1", "content": "Error: boom"}
    assert body["messages"][4]["content"][0]["type"] == "image_url"  # the tool's image after it
    assert body["messages"][4]["content"][-1] == {"type": "text", "text": "Now: noon"}
    assert body["tools"][0]["function"]["name"] == "clock"


async def test_a_streamed_reply_with_tool_calls_and_usage(
    fake: FakeOpenAI, provider: OpenAIProvider
) -> None:
    fake.script(
        ChatReply(
            text="Two calls.",
            tool_calls=(ToolCall("a", {"x": "1" * 40}, id="ca"), ToolCall("b", {}, id="cb")),
            prompt_tokens=500,
            completion_tokens=30,
            cached_tokens=200,
            chunk_size=5,
        )
    )
    streamed: list[str] = []

    async def on_text(text: str) -> None:
        streamed.append(text)

    response = await provider.complete(ask(ChatMessage("user", (TextBlock("go"),))), on_text)
    assert "".join(streamed) == "Two calls." and len(streamed) > 1
    assert response.stop_reason == "tool_use"
    assert [(c.id, c.name, dict(c.input)) for c in response.tool_uses] == [
        ("ca", "a", {"x": "1" * 40}),
        ("cb", "b", {}),
    ]
    usage = response.usage
    assert (usage.input_tokens, usage.cache_read_tokens, usage.output_tokens) == (300, 200, 30)


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (chat_error(401, "Incorrect API key"), ProviderAuthError),
        (chat_error(404, "The model `m` does not exist", "model_not_found"), ProviderBadRequest),
        (chat_error(400, "too long", "context_length_exceeded"), ContextWindowExceeded),
        (chat_error(429, "Rate limit reached"), ProviderRateLimited),
        (chat_error(503, "no capacity"), Overloaded),
        (chat_error(500, "oops"), ProviderUnavailable),
    ],
)
async def test_failures_map_to_our_errors(
    fake: FakeOpenAI, provider: OpenAIProvider, error: object, kind: type[Exception]
) -> None:
    fake.script(error)  # type: ignore[arg-type]
    with pytest.raises(kind) as caught:
        await provider.complete(ask(ChatMessage("user", (TextBlock("hi"),))))
    assert str(caught.value).startswith("local API error") and KEY not in str(caught.value)


async def test_a_cut_stream_is_unavailable(fake: FakeOpenAI, provider: OpenAIProvider) -> None:
    fake.script(ChatReply(text="half of it", cut=True))
    with pytest.raises(ProviderUnavailable, match="ended before"):
        await provider.complete(ask(ChatMessage("user", (TextBlock("hi"),))))


async def test_nothing_listens_there(provider: OpenAIProvider) -> None:
    gone = OpenAIProvider(
        label="local", api_key=None, base_url="http://127.0.0.1:9/v1", max_retries=0
    )
    try:
        with pytest.raises(ProviderUnavailable, match="local API"):
            await gone.complete(ask(ChatMessage("user", (TextBlock("hi"),))))
    finally:
        await gone.aclose()
