"""MCP client on the official Python SDK (ClientSession): a real downstream peer for the gateway tests.

Same command line and output as client.mjs.

    .venv/bin/python client.py (--stdio -- CMD [ARGS...] | --url URL) [--token T] [--run NAME]
                               [--call JSON]... [--parallel] [--list-tools] [--check-passthrough]
                               [--key K] [--header-key K] [--timeout-ms N]

One JSON line per --call on stdout:
    {"isError": bool, "content": [text...], "meta": {...}|null}  or  {"error": msg, "code": int|null}
--timeout-ms: per-request timeout (default 60000).
Exit: 0 after the calls ran, 2 on a connection failure, 3 when the HTTP server answered 401.
"""

from __future__ import annotations

import json
import os
import sys
from contextlib import AsyncExitStack
from typing import Any, NoReturn

import anyio

from mcp import ClientSession, MCPError, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.types import Implementation, PaginatedRequestParams

USAGE = (
    "usage: client.py (--stdio -- CMD [ARGS...] | --url URL) [--token T] [--run NAME] "
    "[--call JSON]... [--parallel] [--list-tools] [--check-passthrough] [--key K] [--header-key K] [--timeout-ms N]"
)


def die(msg: str, code: int = 2) -> NoReturn:
    print(f"client.py: {msg}", file=sys.stderr, flush=True)
    sys.stdout.flush()
    os._exit(code)


def parse_args(argv: list[str]) -> dict[str, Any]:
    o: dict[str, Any] = {
        "calls": [],
        "parallel": False,
        "list_tools": False,
        "check_passthrough": False,
        "command": None,
        "url": None,
        "token": None,
        "run": None,
        "key": None,
        "header_key": None,
        "timeout_ms": 60000,
    }
    i = 0
    while i < len(argv):
        a = argv[i]

        def val() -> str:
            nonlocal i
            if i + 1 >= len(argv):
                die(f"{a} needs a value\n{USAGE}")
            i += 1
            return argv[i]

        if a == "--stdio":
            if i + 2 >= len(argv) or argv[i + 1] != "--":
                die(f"--stdio needs '-- CMD [ARGS...]'\n{USAGE}")
            o["command"] = argv[i + 2]
            o["args"] = argv[i + 3 :]
            break
        elif a in ("--url", "--token", "--run", "--key", "--header-key"):
            o[a[2:].replace("-", "_")] = val()
        elif a == "--timeout-ms":
            raw = val()
            try:
                o["timeout_ms"] = int(raw)
                if o["timeout_ms"] <= 0:
                    raise ValueError
            except ValueError:
                die(f"bad --timeout-ms {raw}")
        elif a == "--call":
            raw = val()
            try:
                c = json.loads(raw)
                if not isinstance(c, dict) or not isinstance(c.get("name"), str):
                    raise ValueError('missing "name"')
            except ValueError as e:
                die(f"bad --call {raw}: {e}")
            o["calls"].append(c)
        elif a == "--parallel":
            o["parallel"] = True
        elif a == "--list-tools":
            o["list_tools"] = True
        elif a == "--check-passthrough":
            o["check_passthrough"] = True
        else:
            die(f"unknown argument {a}\n{USAGE}")
        i += 1
    if (o["command"] is None) == (o["url"] is None):
        die(f"exactly one of --stdio or --url\n{USAGE}")
    return o


def emit(obj: Any) -> None:
    print(json.dumps(obj, separators=(",", ":")), flush=True)


def error_line(err: BaseException) -> dict[str, Any]:
    if isinstance(err, MCPError):
        return {"error": err.message, "code": err.code}
    return {"error": str(err) or type(err).__name__, "code": None}


def result_line(res: Any) -> dict[str, Any]:
    return {
        "isError": bool(res.is_error),
        "content": [b.text for b in res.content if getattr(b, "type", None) == "text"],
        "meta": res.meta if res.meta is not None else None,
    }


def dump(model: Any) -> Any:
    return model.model_dump(by_alias=True, exclude_none=True, mode="json")


# Set once the MCP handshake completed; a failure before that is a connection failure.
_connected = {"ok": False, "saw_401": False}


async def run(o: dict[str, Any]) -> None:
    meta: dict[str, Any] = {}
    if o["run"] is not None:
        meta["idempotent/run"] = o["run"]
    if o["key"] is not None:
        meta["idempotent/key"] = o["key"]

    async def on_response(response: Any) -> None:
        if response.status_code == 401:
            _connected["saw_401"] = True

    async with AsyncExitStack() as stack:
        try:
            if o["url"] is not None:
                headers: dict[str, str] = {}
                if o["token"] is not None:
                    headers["Authorization"] = f"Bearer {o['token']}"
                if o["header_key"] is not None:
                    headers["Idempotency-Key"] = o["header_key"]
                http = create_mcp_http_client(headers=headers)
                http.event_hooks["response"].append(on_response)
                await stack.enter_async_context(http)
                read, write = await stack.enter_async_context(streamable_http_client(o["url"], http_client=http))
            else:
                params = StdioServerParameters(command=o["command"], args=o["args"], env=dict(os.environ))
                read, write = await stack.enter_async_context(stdio_client(params, errlog=sys.stderr))
            session = await stack.enter_async_context(
                ClientSession(
                    read,
                    write,
                    read_timeout_seconds=o["timeout_ms"] / 1000,
                    client_info=Implementation(name="gateway-peer-client-py", version="1.0.0"),
                )
            )
            await session.initialize()
        except Exception as err:  # noqa: BLE001
            connect_failed(err)
        _connected["ok"] = True

        async def call_tool(c: dict[str, Any]) -> dict[str, Any]:
            try:
                res = await session.call_tool(
                    c["name"],
                    c.get("arguments") or {},
                    meta=dict(meta) if meta else None,  # type: ignore[arg-type]
                )
                return result_line(res)
            except Exception as err:  # noqa: BLE001
                return error_line(err)

        if o["list_tools"]:
            tools: list[Any] = []
            cursor = None
            while True:
                page = await session.list_tools(params=PaginatedRequestParams(cursor=cursor) if cursor else None)
                tools.extend(dump(t) for t in page.tools)
                cursor = page.next_cursor
                if not cursor:
                    break
            emit({"tools": tools})

        if o["parallel"]:
            results: list[dict[str, Any] | None] = [None] * len(o["calls"])

            async def one(idx: int, c: dict[str, Any]) -> None:
                results[idx] = await call_tool(c)

            async with anyio.create_task_group() as tg:
                for idx, c in enumerate(o["calls"]):
                    tg.start_soon(one, idx, c)
            for r in results:
                emit(r)
        else:
            for c in o["calls"]:
                emit(await call_tool(c))

        if o["check_passthrough"]:
            out: dict[str, Any] = {}
            try:
                r = await session.read_resource("orders://1182")
                out["resource"] = getattr(r.contents[0], "text", None) if r.contents else None
            except Exception as err:  # noqa: BLE001
                out["resource"] = error_line(err)
            try:
                p = await session.get_prompt("apology", {"name": "Ada"})
                content = p.messages[0].content if p.messages else None
                out["prompt"] = getattr(content, "text", None)
            except Exception as err:  # noqa: BLE001
                out["prompt"] = error_line(err)
            g = await call_tool({"name": "get_order", "arguments": {"order_id": "1182"}})
            out["get_order"] = g if "error" in g else (g["content"][0] if g["content"] else None)
            emit(out)


def connect_failed(err: BaseException) -> NoReturn:
    if _connected["saw_401"]:
        emit({"http_status": 401})
        die("server answered 401", 3)
    die(f"connect failed: {err!r}")


def main() -> None:
    o = parse_args(sys.argv[1:])
    try:
        anyio.run(run, o)
    except SystemExit:
        raise
    except BaseException as err:  # noqa: BLE001
        if not _connected["ok"]:
            connect_failed(err)
        # Teardown of a dead peer (e.g. a killed gateway) must not turn printed results into a failure.
        print(f"client.py: shutdown: {err!r}", file=sys.stderr, flush=True)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
