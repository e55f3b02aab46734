"""Agent clients as people use them, unchanged, against a live server on the simulator (plain and
harmony): the `openai` SDK, LangChain's ChatOpenAI and the OpenAI Agents SDK. Nothing leaves
loopback (the Agents SDK's tracing is off)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pytest
from jsonschema import Draft202012Validator
from pydantic import BaseModel

from tests.conftest import LiveServer, live_server

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")

WEATHER_PARAMS = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
    "required": ["city"],
    "additionalProperties": False,
}
TIME_PARAMS = {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}
TOOLS = [
    {
        "type": "function",
        "function": {"name": "get_weather", "description": "Weather in a city", "parameters": WEATHER_PARAMS},
    },
    {"type": "function", "function": {"name": "get_time", "description": "Time in a zone", "parameters": TIME_PARAMS}},
]
ASK = [{"role": "user", "content": "What is the weather in Oslo?"}]
TEXT_TOKENS = 400  # harmony thinks first: room for an answer after it


class Person(BaseModel):
    name: str
    age: int


@pytest.fixture(scope="module", params=["plain", "harmony"])
def server(request: pytest.FixtureRequest) -> Iterator[LiveServer]:
    extra = ["engine.sim.harmony=true", "engine.sim.natural_stop=true"] if request.param == "harmony" else []
    with live_server(*extra) as live:
        yield live


def valid(name: str, arguments: str) -> dict:
    schema = WEATHER_PARAMS if name == "get_weather" else TIME_PARAMS
    value = json.loads(arguments)
    Draft202012Validator(schema).validate(value)
    return value


# ----------------------------------------------------------------------------- the openai SDK


@pytest.mark.parametrize(
    "choice, name",
    [
        ("auto", None),
        ("required", None),  # the simulator picks among them
        ({"type": "function", "function": {"name": "get_time"}}, "get_time"),
    ],
)
def test_openai_sdk_calls_as_tool_choice_says(server: LiveServer, choice, name) -> None:
    reply = server.client().chat.completions.create(
        model="sim", messages=ASK, tools=TOOLS, tool_choice=choice, max_tokens=300
    )
    calls = reply.choices[0].message.tool_calls
    assert reply.choices[0].finish_reason == "tool_calls" and calls
    for call in calls:
        assert call.type == "function" and call.id.startswith("call_")
        assert name is None or call.function.name == name
        valid(call.function.name, call.function.arguments)


def test_openai_sdk_tool_choice_none_answers_in_text(server: LiveServer) -> None:
    reply = server.client().chat.completions.create(
        model="sim", messages=ASK, tools=TOOLS, tool_choice="none", max_tokens=TEXT_TOKENS
    )
    assert not reply.choices[0].message.tool_calls and reply.choices[0].message.content


def test_openai_sdk_streams_a_call_in_openai_pieces(server: LiveServer) -> None:
    chunks = list(
        server.client().chat.completions.create(model="sim", messages=ASK, tools=TOOLS, max_tokens=300, stream=True)
    )
    pieces = [c.choices[0].delta.tool_calls[0] for c in chunks if c.choices and c.choices[0].delta.tool_calls]
    first, rest = pieces[0], pieces[1:]
    assert (first.index, first.type, first.function.arguments) == (0, "function", "")
    assert first.function.name in {t["function"]["name"] for t in TOOLS}  # the simulator picks among them
    assert first.id.startswith("call_") and rest and all(p.id is None and p.function.name is None for p in rest)
    valid(first.function.name, "".join(p.function.arguments for p in rest))
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"


def test_openai_sdk_tool_loop_ends_in_text(server: LiveServer) -> None:
    client = server.client()
    messages: list = list(ASK)
    reply = client.chat.completions.create(model="sim", messages=messages, tools=TOOLS, max_tokens=300)
    assert reply.choices[0].message.content is None
    call = reply.choices[0].message.tool_calls[0]
    valid(call.function.name, call.function.arguments)
    messages += [
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": "3 C, rain"},
    ]
    final = client.chat.completions.create(model="sim", messages=messages, tools=TOOLS, max_tokens=TEXT_TOKENS)
    assert not final.choices[0].message.tool_calls and final.choices[0].message.content


def test_openai_sdk_takes_its_own_message_object_back(server: LiveServer) -> None:
    """Clients append the reply's message object as it is, with its null fields."""
    client = server.client()
    reply = client.chat.completions.create(model="sim", messages=ASK, tools=TOOLS, max_tokens=300)
    message = reply.choices[0].message
    history = [
        *ASK,
        message,
        {"role": "tool", "tool_call_id": message.tool_calls[0].id, "content": "3 C"},
        {"role": "assistant", **message.model_dump(exclude={"tool_calls"}), "content": "It rains."},
        {"role": "user", "content": "Thanks"},
    ]
    final = client.chat.completions.create(model="sim", messages=history, max_tokens=TEXT_TOKENS)
    assert final.choices[0].message.content


def test_openai_sdk_parses_structured_outputs(server: LiveServer) -> None:
    client = server.client()
    parsed = client.chat.completions.parse(
        model="sim", messages=[{"role": "user", "content": "Invent a person"}], response_format=Person, max_tokens=300
    )
    assert isinstance(parsed.choices[0].message.parsed, Person)
    Draft202012Validator(Person.model_json_schema()).validate(json.loads(parsed.choices[0].message.content))
    reply = client.chat.completions.create(
        model="sim", messages=ASK, response_format={"type": "json_object"}, max_tokens=300
    )
    assert isinstance(json.loads(reply.choices[0].message.content), dict)


# ----------------------------------------------------------------------------- LangChain


def chat_model(server: LiveServer, **kwargs):
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(base_url=server.base_url, api_key="sk-test", model="sim", max_retries=0, **kwargs)


def test_langchain_bind_tools_loop(server: LiveServer) -> None:
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langchain_core.tools import tool
    from langchain_core.utils.function_calling import convert_to_openai_tool

    seen: list[str] = []

    @tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        seen.append(city)
        return f"3 C in {city}"

    model = chat_model(server, max_tokens=TEXT_TOKENS).bind_tools([get_weather])
    messages: list = [HumanMessage("What is the weather in Oslo?")]
    first = model.invoke(messages)
    assert [c["name"] for c in first.tool_calls] == ["get_weather"]
    Draft202012Validator(convert_to_openai_tool(get_weather)["function"]["parameters"]).validate(
        first.tool_calls[0]["args"]
    )
    messages += [first, *(ToolMessage(get_weather.invoke(c["args"]), tool_call_id=c["id"]) for c in first.tool_calls)]
    final = model.invoke(messages)
    assert len(seen) == 1 and isinstance(seen[0], str)
    assert isinstance(final, AIMessage) and not final.tool_calls and final.content


@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
def test_langchain_with_structured_output(server: LiveServer, method: str) -> None:
    person = chat_model(server, max_tokens=300).with_structured_output(Person, method=method).invoke("Invent a person")
    assert isinstance(person, Person)


# ----------------------------------------------------------------------------- the OpenAI Agents SDK


async def run_weather_agent(base_url: str, model_class: str, max_tokens: int) -> tuple[list[str], object]:
    """An agent with one function tool, on the Agents SDK model `model_class`: the calls it made
    and the run's result."""
    import agents
    from agents import Agent, ModelSettings, Runner, function_tool, set_tracing_disabled
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    calls: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        calls.append(city)
        return f"3 C in {city}"

    client = AsyncOpenAI(base_url=base_url, api_key="sk-test", max_retries=0)
    agent = Agent(
        name="forecaster",
        instructions="Answer with the weather.",
        tools=[get_weather],
        model=getattr(agents, model_class)(model="sim", openai_client=client),
        model_settings=ModelSettings(max_tokens=max_tokens),
    )
    try:
        return calls, await Runner.run(agent, "What is the weather in Oslo?", max_turns=4)
    finally:
        await client.close()


async def test_agents_sdk_runs_an_agent_that_calls_a_tool_then_answers(server: LiveServer) -> None:
    calls, result = await run_weather_agent(server.base_url, "OpenAIChatCompletionsModel", TEXT_TOKENS)
    assert len(calls) == 1 and isinstance(calls[0], str)
    assert isinstance(result.final_output, str) and result.final_output.strip()
