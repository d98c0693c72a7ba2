"""Refund MCP server on the official Python SDK: a real upstream for the gateway tests.

Same behaviour as refund_server.mjs.

    .venv/bin/python refund_server.py              # stdio
    .venv/bin/python refund_server.py --http PORT  # streamable HTTP on 127.0.0.1:PORT/mcp (0 = any free port)

Env: REFUND_LEDGER (required) file that gets one JSON line per refund_order call;
     REFUND_FAIL_AFTER_FIRST=1 the first refund_order call of the process records, then fails;
     REFUND_HANG_AFTER=1 every refund_order call records, then never answers.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import sys
from typing import Annotated, Any

import anyio
from pydantic import Field

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

log = logging.getLogger("refund_server.py")

LEDGER = os.environ.get("REFUND_LEDGER")
FAIL_AFTER_FIRST = os.environ.get("REFUND_FAIL_AFTER_FIRST") == "1"
HANG_AFTER = os.environ.get("REFUND_HANG_AFTER") == "1"

# Process-wide state: shared by every session in HTTP mode.
_state = {"count": 0, "first_done": False}

mcp = MCPServer("refund-server-py", version="1.0.0", log_level="WARNING")


def _drop_default(schema: dict[str, Any]) -> None:
    # `memo` is optional with no default: advertise it as a plain string.
    schema.pop("default", None)
    schema.pop("anyOf", None)
    schema["type"] = "string"


@mcp.tool(
    structured_output=False,
    description="Refund an order. Moves real money: each call issues a new refund.",
    annotations=ToolAnnotations(destructive_hint=True, idempotent_hint=False, read_only_hint=False),
)
async def refund_order(
    order_id: Annotated[str, Field(description="Order to refund")],
    amount_cents: Annotated[int, Field(description="Amount in cents")],
    reason: Annotated[str, Field(description="Why the refund is issued (free text)")],
    ctx: Context,
    currency: Annotated[str, Field(description="ISO currency code")] = "usd",
    memo: Annotated[
        str | None, Field(description="Optional note for the ledger", json_schema_extra=_drop_default)
    ] = None,
) -> str:
    meta = ctx.request_context.meta or {}
    headers = ctx.headers  # the Starlette request's headers over HTTP, None over stdio
    line = {
        "order_id": order_id,
        "amount_cents": amount_cents,
        "meta_key": meta.get("idempotent/key"),
        "header_key": headers.get("idempotency-key") if headers is not None else None,
        "pid": os.getpid(),
    }
    with open(LEDGER, "a", encoding="utf-8") as f:  # type: ignore[arg-type]
        f.write(json.dumps(line, separators=(",", ":")) + "\n")
        f.flush()
    _state["count"] += 1
    n = _state["count"]
    if HANG_AFTER:
        log.warning("[refund_server.py] refund re_%d recorded; hanging", n)
        await anyio.sleep_forever()
    if FAIL_AFTER_FIRST and not _state["first_done"]:
        _state["first_done"] = True
        raise ToolError(f"payment provider timed out after refund re_{n} was issued")
    _state["first_done"] = True
    return f"refunded {amount_cents} cents on order {order_id} (refund re_{n})"


@mcp.tool(
    structured_output=False,
    description="Look up an order (read-only).",
    annotations=ToolAnnotations(read_only_hint=True),
)
def get_order(order_id: str) -> str:
    return f"order {order_id}: paid"


@mcp.tool(structured_output=False, description="Quote a price.")
def price_quote(amount: float) -> str:
    return f"quote {amount:g}"


@mcp.tool(structured_output=False, description="Send a note about an order.")
def send_note(order_id: str, note: str) -> str:
    return f"note sent on order {order_id}: {note}"


@mcp.resource("orders://1182", name="order-1182", description="Order 1182", mime_type="text/plain")
def order_1182() -> str:
    return "order 1182"


@mcp.prompt(description="Apologize to a customer")
def apology(name: str) -> str:
    return f"Write a short apology to {name}."


async def serve_http(port: int) -> None:
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(128)
    sock.setblocking(False)
    actual = sock.getsockname()[1]

    app = mcp.streamable_http_app(streamable_http_path="/mcp", host="127.0.0.1")
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")
    server = uvicorn.Server(config)

    async with anyio.create_task_group() as tg:
        tg.start_soon(server.serve, [sock])
        while not server.started:
            await anyio.sleep(0.01)
        print(f"listening {actual}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description="Refund MCP server (Python SDK)")
    parser.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP on 127.0.0.1:PORT/mcp")
    args = parser.parse_args()
    if not LEDGER:
        print("[refund_server.py] REFUND_LEDGER must name the ledger file", file=sys.stderr)
        sys.exit(2)
    if args.http is not None:
        anyio.run(serve_http, args.http)
    else:
        mcp.run("stdio")


if __name__ == "__main__":
    main()
