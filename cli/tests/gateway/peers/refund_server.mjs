#!/usr/bin/env node
// Refund MCP server on the official TypeScript SDK: a real upstream for the gateway tests.
// Same behaviour as refund_server.py.
//
//   node refund_server.mjs              # stdio
//   node refund_server.mjs --http PORT  # streamable HTTP on 127.0.0.1:PORT/mcp (0 = any free port)
//
// Env: REFUND_LEDGER (required) file that gets one JSON line per refund_order call;
//      REFUND_FAIL_AFTER_FIRST=1 the first refund_order call of the process records, then fails;
//      REFUND_HANG_AFTER=1 every refund_order call records, then never answers.
// Tools beyond refund_order: count_slowly (progress notifications), wait_for_cancel
// (ledger lines {"event":"started"|"cancelled","order_id":...}).
import { randomUUID } from 'node:crypto';
import { appendFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';

const log = (...args) => console.error('[refund_server.mjs]', ...args);

const LEDGER = process.env.REFUND_LEDGER;
if (!LEDGER) {
  log('REFUND_LEDGER must name the ledger file');
  process.exit(2);
}
const FAIL_AFTER_FIRST = process.env.REFUND_FAIL_AFTER_FIRST === '1';
const HANG_AFTER = process.env.REFUND_HANG_AFTER === '1';

// Process-wide state: shared by every session in HTTP mode.
let refundCount = 0;
let firstCallDone = false;

function header(extra, name) {
  const headers = extra?.requestInfo?.headers;
  if (!headers) return null;
  const v = headers[name.toLowerCase()];
  if (Array.isArray(v)) return v[0] ?? null;
  return v ?? null;
}

function buildServer() {
  const server = new McpServer({ name: 'refund-server-ts', version: '1.0.0' });

  const refundTool = server.registerTool(
    'refund_order',
    {
      description: 'Refund an order. Moves real money: each call issues a new refund.',
      inputSchema: {
        order_id: z.string().describe('Order to refund'),
        amount_cents: z.number().int().describe('Amount in cents'),
        reason: z.string().describe('Why the refund is issued (free text)'),
        currency: z.string().default('usd').describe('ISO currency code'),
        memo: z.string().optional().describe('Optional note for the ledger'),
      },
      annotations: { destructiveHint: true, idempotentHint: false, readOnlyHint: false },
    },
    async (args, extra) => {
      const line = {
        order_id: args.order_id,
        amount_cents: args.amount_cents,
        meta_key: extra?._meta?.['idempotent/key'] ?? null,
        header_key: header(extra, 'Idempotency-Key'),
        pid: process.pid,
      };
      // appendFileSync hands the bytes to the kernel before we answer.
      appendFileSync(LEDGER, JSON.stringify(line) + '\n');
      refundCount += 1;
      const n = refundCount;
      if (HANG_AFTER) {
        log(`refund re_${n} recorded; hanging`);
        await new Promise(() => {});
      }
      if (FAIL_AFTER_FIRST && !firstCallDone) {
        firstCallDone = true;
        throw new Error(`payment provider timed out after refund re_${n} was issued`);
      }
      firstCallDone = true;
      return {
        content: [
          { type: 'text', text: `refunded ${args.amount_cents} cents on order ${args.order_id} (refund re_${n})` },
        ],
      };
    },
  );

  // A tool whose only property is a call id: a key template may not use it.
  server.registerTool(
    'log_call',
    {
      description: 'Log a tool call.',
      inputSchema: { tool_call_id: z.string(), order_id: z.string() },
    },
    async ({ tool_call_id }) => ({ content: [{ type: 'text', text: `logged ${tool_call_id}` }] }),
  );

  // Changes refund_order's schema under a running client: `order_id` becomes
  // `order_number`, and the server says its tool list changed.
  server.registerTool(
    'rename_order_id',
    { description: "Rename refund_order's order_id to order_number.", inputSchema: {} },
    async () => {
      refundTool.update({
        paramsSchema: {
          order_number: z.string(),
          amount_cents: z.number().int(),
          reason: z.string(),
        },
      });
      return { content: [{ type: 'text', text: 'renamed' }] };
    },
  );

  server.registerTool(
    'get_order',
    {
      description: 'Look up an order (read-only).',
      inputSchema: { order_id: z.string() },
      annotations: { readOnlyHint: true },
    },
    async ({ order_id }) => ({ content: [{ type: 'text', text: `order ${order_id}: paid` }] }),
  );

  server.registerTool(
    'price_quote',
    {
      description: 'Quote a price.',
      inputSchema: { amount: z.number() },
    },
    async ({ amount }) => ({ content: [{ type: 'text', text: `quote ${amount}` }] }),
  );

  server.registerTool(
    'send_note',
    {
      description: 'Send a note about an order.',
      inputSchema: { order_id: z.string(), note: z.string() },
    },
    async ({ order_id, note }) => ({ content: [{ type: 'text', text: `note sent on order ${order_id}: ${note}` }] }),
  );

  // Reports progress when the request carries a progress token.
  server.registerTool(
    'count_slowly',
    {
      description: 'Count to `steps`, reporting progress on the way.',
      inputSchema: { steps: z.number().int().describe('How many steps to count') },
    },
    async ({ steps }, extra) => {
      const progressToken = extra?._meta?.progressToken;
      if (progressToken !== undefined) {
        for (let i = 1; i <= steps; i++) {
          await extra.sendNotification({
            method: 'notifications/progress',
            params: { progressToken, progress: i, total: steps },
          });
        }
      }
      return { content: [{ type: 'text', text: `counted ${steps}` }] };
    },
  );

  // Records that it started, then waits for the client to cancel the request
  // (or 30 s); a cancellation is recorded in the ledger too. Ledger lines of this
  // tool carry an `event` field and no `amount_cents`.
  server.registerTool(
    'wait_for_cancel',
    {
      description: 'Wait until the request is cancelled (at most 30 s).',
      inputSchema: { order_id: z.string() },
    },
    async ({ order_id }, extra) => {
      appendFileSync(LEDGER, JSON.stringify({ event: 'started', order_id }) + '\n');
      const signal = extra.signal;
      const cancelled = await new Promise((resolve) => {
        if (signal.aborted) {
          resolve(true);
          return;
        }
        const timer = setTimeout(() => {
          signal.removeEventListener('abort', onAbort);
          resolve(false);
        }, 30000);
        const onAbort = () => {
          clearTimeout(timer);
          resolve(true);
        };
        signal.addEventListener('abort', onAbort, { once: true });
      });
      if (cancelled) {
        appendFileSync(LEDGER, JSON.stringify({ event: 'cancelled', order_id }) + '\n');
        log(`wait_for_cancel ${order_id} cancelled`);
        throw new Error(`wait_for_cancel ${order_id} cancelled`);
      }
      return { content: [{ type: 'text', text: 'not cancelled' }] };
    },
  );

  server.registerResource(
    'order-1182',
    'orders://1182',
    { description: 'Order 1182', mimeType: 'text/plain' },
    async (uri) => ({ contents: [{ uri: uri.href, mimeType: 'text/plain', text: 'order 1182' }] }),
  );

  server.registerPrompt(
    'apology',
    { description: 'Apologize to a customer', argsSchema: { name: z.string() } },
    ({ name }) => ({
      messages: [{ role: 'user', content: { type: 'text', text: `Write a short apology to ${name}.` } }],
    }),
  );

  return server;
}

async function serveStdio() {
  const server = buildServer();
  await server.connect(new StdioServerTransport());
  log('serving on stdio');
}

async function serveHttp(port) {
  const transports = new Map(); // session id -> transport

  const httpServer = createServer(async (req, res) => {
    try {
      const url = new URL(req.url, 'http://127.0.0.1');
      if (url.pathname !== '/mcp') {
        res.writeHead(404).end('not found');
        return;
      }
      const sid = req.headers['mcp-session-id'];
      if (sid) {
        const t = transports.get(sid);
        if (!t) {
          res.writeHead(404, { 'content-type': 'application/json' }).end(
            JSON.stringify({ jsonrpc: '2.0', error: { code: -32001, message: 'Session not found' }, id: null }),
          );
          return;
        }
        await t.handleRequest(req, res);
        return;
      }
      if (req.method !== 'POST') {
        res.writeHead(400, { 'content-type': 'application/json' }).end(
          JSON.stringify({ jsonrpc: '2.0', error: { code: -32000, message: 'Missing session id' }, id: null }),
        );
        return;
      }
      // No session: only an initialize request may open one.
      const chunks = [];
      for await (const c of req) chunks.push(c);
      let body;
      try {
        body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      } catch {
        res.writeHead(400, { 'content-type': 'application/json' }).end(
          JSON.stringify({ jsonrpc: '2.0', error: { code: -32700, message: 'Parse error' }, id: null }),
        );
        return;
      }
      if (!isInitializeRequest(body)) {
        res.writeHead(400, { 'content-type': 'application/json' }).end(
          JSON.stringify({ jsonrpc: '2.0', error: { code: -32000, message: 'Missing session id' }, id: null }),
        );
        return;
      }
      const transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        onsessioninitialized: (id) => transports.set(id, transport),
      });
      transport.onclose = () => {
        if (transport.sessionId) transports.delete(transport.sessionId);
      };
      await buildServer().connect(transport);
      await transport.handleRequest(req, res, body);
    } catch (err) {
      log('request failed:', err);
      if (!res.headersSent) res.writeHead(500).end('internal error');
    }
  });

  await new Promise((resolve, reject) => {
    httpServer.once('error', reject);
    httpServer.listen(port, '127.0.0.1', resolve);
  });
  process.stdout.write(`listening ${httpServer.address().port}\n`);
}

function main() {
  const argv = process.argv.slice(2);
  const i = argv.indexOf('--http');
  if (i >= 0) {
    const port = Number.parseInt(argv[i + 1] ?? '', 10);
    if (!Number.isInteger(port) || port < 0) {
      log('usage: refund_server.mjs [--http PORT]');
      process.exit(2);
    }
    return serveHttp(port);
  }
  return serveStdio();
}

main().catch((err) => {
  log('fatal:', err);
  process.exit(1);
});
