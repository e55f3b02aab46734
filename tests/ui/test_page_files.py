"""The page's file inputs against a caller who names a server path instead of uploading: every
Gradio endpoint of the page that takes a file (found from the Blocks' own config, so a new one is
covered without editing this) refuses it, with keys and without, and never says whether it exists."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from gradio_client import Client, handle_file

from tests.conftest import LiveServer
from tests.ui.conftest import UI, start_server
from tests.ui.test_page_keys import session
from ui.account.uploads import REFUSED, UploadRefused, uploaded_file

TEAM = "server.keys=[{name: alice, key: sk-alice-0001}, {name: bob, key: sk-bob-000001}]"
FILE_TYPES = {
    "file",
    "uploadbutton",
    "image",
    "audio",
    "video",
    "gallery",
    "multimodaltextbox",
    "model3d",
    "downloadbutton",
    "simpleimage",
    "imageeditor",
    "chatbot",
    "dataframe",
}
SECRET = "the server's own secret 4d1f"


@pytest.fixture(scope="module")
def team() -> Iterator[LiveServer]:
    with contextlib.ExitStack() as stack:
        yield start_server(stack, UI, TEAM)


@pytest.fixture
def secrets(tmp_path: Path) -> list[Path]:
    out = []
    for suffix in (".txt", ".jsonl", ".json"):
        path = tmp_path / f"secret{suffix}"
        path.write_text(json.dumps({"prompt": SECRET, "format": SECRET}) + "\n")
        out.append(path)
    return out


def file_endpoints(config: dict) -> list[tuple[int, int, str]]:
    """(fn_index, input position, component type) of every input that can carry a file."""
    types = {c["id"]: c["type"] for c in config["components"]}
    out = []
    for index, dependency in enumerate(config["dependencies"]):
        for position, component in enumerate(dependency["inputs"]):
            if types.get(component) in FILE_TYPES:
                out.append((index, position, types[component]))
    return out


def file_data(path: str) -> dict:
    return {"path": path, "orig_name": Path(path).name, "meta": {"_type": "gradio.FileData"}}


def join(http: httpx.Client, config: dict, fn_index: int, position: int, value: object) -> tuple[int, str]:
    """Gradio's own queue protocol by hand: the join's status and everything the stream said."""
    defaults = {c["id"]: c.get("props", {}).get("value") for c in config["components"]}
    data = [defaults.get(component) for component in config["dependencies"][fn_index]["inputs"]]
    data[position] = value
    joined = http.post(
        "/gradio_api/queue/join",
        json={"data": data, "fn_index": fn_index, "session_hash": "s1", "trigger_id": None, "event_data": None},
    )
    if joined.status_code != 200:
        return joined.status_code, joined.text
    with http.stream("GET", "/gradio_api/queue/data", params={"session_hash": "s1"}, timeout=30) as stream:
        text = ""
        for line in stream.iter_lines():
            text += line + "\n"
            if '"process_completed"' in line:
                break
    return 200, text


@pytest.mark.parametrize("keyed", [True, False])
def test_no_file_input_opens_a_server_path(team: LiveServer, make_ui_server, secrets: list[Path], keyed: bool) -> None:
    live = team if keyed else make_ui_server()
    headers = session(live, "sk-bob-000001") if keyed else {}
    with httpx.Client(base_url=live.url, headers=headers, timeout=30) as http:
        config = http.get("/config").json()
        endpoints = file_endpoints(config)
        assert {"file", "uploadbutton"} <= {kind for _, _, kind in endpoints}  # the batch and the import
        for fn_index, position, kind in sorted(endpoints, key=lambda e: e[2] == "chatbot"):
            for secret in [*secrets, Path("/nonexistent/x.json")]:
                reference = file_data(str(secret))
                value = (
                    [reference]
                    if kind in ("gallery",)
                    else [{"role": "user", "content": [{"file": reference}]}]
                    if kind == "chatbot"
                    else reference
                )
                status, said = join(http, config, fn_index, position, value)
                assert SECRET not in said and str(secret) not in said, (fn_index, kind, said[:300])
                assert status == 403 and REFUSED in said, (fn_index, kind, status, said[:300])


def test_a_file_another_session_uploaded_is_refused(team: LiveServer, tmp_path: Path) -> None:
    mine = tmp_path / "mine.txt"
    mine.write_text("a prompt of alice's\n")
    alice, bob = session(team, "sk-alice-0001"), session(team, "sk-bob-000001")
    with httpx.Client(base_url=team.url, timeout=30) as http:
        uploaded = http.post(
            "/gradio_api/upload", headers=alice, files={"files": ("mine.txt", mine.read_bytes())}
        ).json()
        config = http.get("/config", headers=alice).json()
        fn_index, position, _ = next(e for e in file_endpoints(config) if e[2] == "file")
        http.headers.update(bob)
        status, said = join(http, config, fn_index, position, file_data(uploaded[0]))
    assert status == 403 and REFUSED in said


def test_an_uploaded_file_still_works(team: LiveServer, tmp_path: Path) -> None:
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("one\ntwo\nthree\n")
    client = Client(team.url + "/", headers=session(team, "sk-alice-0001"), verbose=False)
    status, table, *_ = client.predict("", handle_file(str(prompts)), "low", 2, "English", api_name="/batch")
    assert "3" in status and [row[1] for row in table["data"]] == ["one", "two", "three"]


def test_uploads_over_the_page_limit_are_refused_at_the_door(make_ui_server, tmp_path: Path) -> None:
    live = make_ui_server("ui.max_upload_bytes=2048")
    big, small = tmp_path / "big.txt", tmp_path / "small.txt"
    big.write_text("x" * 4096)
    small.write_text("y" * 1500)
    with httpx.Client(base_url=live.url, timeout=30) as http:
        assert http.post("/gradio_api/upload", files={"files": ("big.txt", big.read_bytes())}).status_code == 413
        assert http.post("/gradio_api/upload", files={"files": ("small.txt", small.read_bytes())}).status_code == 200


def test_a_handler_opens_only_files_in_the_upload_folder(tmp_path: Path) -> None:
    """The handlers' own check, beneath the one on the wire."""
    outside = tmp_path / "x.txt"
    outside.write_text("x")
    for path in (str(outside), "/etc/passwd", "../../etc/passwd", "/nonexistent"):
        with pytest.raises(UploadRefused) as refused:
            uploaded_file(path)
        assert str(refused.value) == REFUSED
    assert uploaded_file(None) is None


@pytest.mark.parametrize(
    "component",
    [
        {"component": "chatbot", "value": [], "constructor_args": {"avatar_images": ["{secret}", None]}, "props": {}},
        {"component": "button", "value": "x", "constructor_args": {"icon": "{secret}"}, "props": {}},
    ],
)
def test_a_chat_message_that_builds_a_component_is_refused(
    team: LiveServer, secrets: list[Path], component: dict
) -> None:
    """A Chatbot message of type "component" builds one on the server from the client's
    arguments; an avatar or icon path would be copied into Gradio's cache, served by /file=."""
    message = json.loads(json.dumps({"type": "component", **component}).replace("{secret}", str(secrets[2])))
    with httpx.Client(base_url=team.url, headers=session(team, "sk-bob-000001"), timeout=30) as http:
        config = http.get("/config").json()
        fn_index, position, _ = next(e for e in file_endpoints(config) if e[2] == "chatbot")
        status, said = join(http, config, fn_index, position, [{"role": "user", "content": [message]}])
    assert status == 403 and REFUSED in said and str(secrets[2]) not in said


def test_an_upload_named_the_rfc_5987_way_is_a_400_without_a_traceback(team: LiveServer, caplog) -> None:
    body = (
        b"--xx\r\nContent-Disposition: form-data; name=\"files\"; filename*=UTF-8''..%2F..%2Fevil.txt\r\n"
        b"Content-Type: text/plain\r\n\r\nhello\r\n--xx--\r\n"
    )
    with httpx.Client(base_url=team.url, headers=session(team, "sk-bob-000001"), timeout=30) as http:
        answer = http.post(
            "/gradio_api/upload", content=body, headers={"Content-Type": "multipart/form-data; boundary=xx"}
        )
    assert answer.status_code == 400, answer.text
    assert not [r for r in caplog.records if r.exc_info], [r.getMessage() for r in caplog.records]
