#!/usr/bin/env node
// MCP client on the official TypeScript SDK: a real downstream peer for the gateway tests.
// Same command line and output as client.py.
//
//   node client.mjs (--stdio -- CMD [ARGS...] | --url URL) [--token T] [--run NAME]
//                   [--call JSON]... [--parallel] [--list-tools] [--check-passthrough]
//                   [--key K] [--header-key K] [--timeout-ms N]
//                   [--progress] [--cancel-after-ms N]
//
// --timeout-ms: per-request timeout (default 60000, the SDK's default). Note: when an HTTP
// server dies mid-call, this SDK version keeps the call pending until the timeout.
// --progress: each call carries a progressToken (_meta.progressToken, 1, 2, ...) and its line
// gets "progress": [progress values received, in order]. The tokens are set here rather than
// through the SDK's `onprogress` option: this SDK version drops progress notifications that
// arrive in the same read as the response (the response handler removes the progress handler
// before the queued notifications run).
// --cancel-after-ms: each call is aborted N ms after it is sent (the SDK sends
// notifications/cancelled); its line is then {"error": ..., "code": ...}. The client waits
// 300 ms after an abort before closing, so that the cancellation reaches the server.
// One JSON line per --call on stdout:
//   {"isError": bool, "content": [text...], "meta": {...}|null}  or  {"error": msg, "code": int|null}
// Exit: 0 after the calls ran, 2 on a connection failure, 3 when the HTTP server answered 401.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport, StreamableHTTPError } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js';
import { McpError, ProgressNotificationSchema } from '@modelcontextprotocol/sdk/types.js';

const USAGE =
  'usage: client.mjs (--stdio -- CMD [ARGS...] | --url URL) [--token T] [--run NAME] ' +
  '[--call JSON]... [--parallel] [--list-tools] [--check-passthrough] [--key K] [--header-key K] [--timeout-ms N] ' +
  '[--progress] [--cancel-after-ms N]';

function die(msg, code = 2) {
  process.stderr.write(`client.mjs: ${msg}\n`);
  process.exit(code);
}

function parseArgs(argv) {
  const o = { calls: [], parallel: false, listTools: false, checkPassthrough: false, timeoutMs: 60000, progress: false };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const val = () => {
      if (i + 1 >= argv.length) die(`${a} needs a value\n${USAGE}`);
      return argv[++i];
    };
    switch (a) {
      case '--stdio':
        if (argv[i + 1] !== '--' || i + 2 >= argv.length) die(`--stdio needs '-- CMD [ARGS...]'\n${USAGE}`);
        o.command = argv[i + 2];
        o.args = argv.slice(i + 3);
        i = argv.length;
        break;
      case '--url': o.url = val(); break;
      case '--token': o.token = val(); break;
      case '--run': o.run = val(); break;
      case '--key': o.key = val(); break;
      case '--header-key': o.headerKey = val(); break;
      case '--timeout-ms': {
        const raw = val();
        o.timeoutMs = Number.parseInt(raw, 10);
        if (!(o.timeoutMs > 0)) die(`bad --timeout-ms ${raw}`);
        break;
      }
      case '--cancel-after-ms': {
        const raw = val();
        o.cancelAfterMs = Number.parseInt(raw, 10);
        if (!(o.cancelAfterMs >= 0)) die(`bad --cancel-after-ms ${raw}`);
        break;
      }
      case '--progress': o.progress = true; break;
      case '--call': {
        const raw = val();
        try {
          const c = JSON.parse(raw);
          if (typeof c?.name !== 'string') throw new Error('missing "name"');
          o.calls.push(c);
        } catch (e) {
          die(`bad --call ${raw}: ${e.message}`);
        }
        break;
      }
      case '--parallel': o.parallel = true; break;
      case '--list-tools': o.listTools = true; break;
      case '--check-passthrough': o.checkPassthrough = true; break;
      default: die(`unknown argument ${a}\n${USAGE}`);
    }
  }
  if (!o.command === !o.url) die(`exactly one of --stdio or --url\n${USAGE}`);
  return o;
}

const print = (obj) => process.stdout.write(JSON.stringify(obj) + '\n');

// The JSON-RPC error message without the SDK's "MCP error <code>: " prefix.
function errorLine(err) {
  if (err instanceof McpError) {
    const prefix = `MCP error ${err.code}: `;
    const msg = err.message.startsWith(prefix) ? err.message.slice(prefix.length) : err.message;
    return { error: msg, code: err.code };
  }
  return { error: String(err?.message ?? err), code: Number.isInteger(err?.code) ? err.code : null };
}

function resultLine(res) {
  return {
    isError: res.isError === true,
    content: (res.content ?? []).filter((b) => b.type === 'text').map((b) => b.text),
    meta: res._meta ?? null,
  };
}

function is401(err) {
  return (err instanceof StreamableHTTPError && err.code === 401) || err instanceof UnauthorizedError;
}

async function main() {
  const o = parseArgs(process.argv.slice(2));
  const meta = {};
  if (o.run !== undefined) meta['idempotent/run'] = o.run;
  if (o.key !== undefined) meta['idempotent/key'] = o.key;
  const callMeta = Object.keys(meta).length ? meta : undefined;

  let transport;
  if (o.url) {
    const headers = {};
    if (o.token !== undefined) headers.Authorization = `Bearer ${o.token}`;
    if (o.headerKey !== undefined) headers['Idempotency-Key'] = o.headerKey;
    transport = new StreamableHTTPClientTransport(new URL(o.url), { requestInit: { headers } });
  } else {
    transport = new StdioClientTransport({ command: o.command, args: o.args, env: { ...process.env }, stderr: 'inherit' });
  }

  const client = new Client({ name: 'gateway-peer-client-ts', version: '1.0.0' });
  client.onerror = (err) => process.stderr.write(`client.mjs: transport: ${err?.message ?? err}\n`);
  const reqOpts = { timeout: o.timeoutMs };
  try {
    await client.connect(transport);
  } catch (err) {
    if (is401(err)) {
      print({ http_status: 401 });
      process.exit(3);
    }
    die(`connect failed: ${err?.message ?? err}`);
  }

  // progressToken -> progress values received for it
  const progressByToken = new Map();
  let nextProgressToken = 1;
  if (o.progress) {
    client.setNotificationHandler(ProgressNotificationSchema, (n) => {
      const values = progressByToken.get(n.params.progressToken);
      if (values) values.push(n.params.progress);
      else process.stderr.write(`client.mjs: progress for unknown token ${JSON.stringify(n.params.progressToken)}\n`);
    });
  }

  let aborted = false;
  const callTool = async (c, extras = false) => {
    const opts = { ...reqOpts };
    const progress = [];
    let progressToken;
    if (extras && o.progress) {
      progressToken = nextProgressToken++;
      progressByToken.set(progressToken, progress);
    }
    let timer;
    if (extras && o.cancelAfterMs !== undefined) {
      const ac = new AbortController();
      opts.signal = ac.signal;
      timer = setTimeout(() => {
        aborted = true;
        ac.abort();
      }, o.cancelAfterMs);
    }
    let line;
    try {
      const params = { name: c.name, arguments: c.arguments ?? {} };
      if (callMeta) params._meta = { ...callMeta };
      if (progressToken !== undefined) params._meta = { ...params._meta, progressToken };
      line = resultLine(await client.callTool(params, undefined, opts));
    } catch (err) {
      line = errorLine(err);
    } finally {
      clearTimeout(timer);
    }
    if (extras && o.progress) line.progress = progress;
    return line;
  };
  const userCall = (c) => callTool(c, true);

  if (o.listTools) {
    const tools = [];
    let cursor;
    do {
      const page = await client.listTools(cursor ? { cursor } : undefined, reqOpts);
      tools.push(...page.tools);
      cursor = page.nextCursor;
    } while (cursor);
    print({ tools });
  }

  if (o.parallel) {
    for (const line of await Promise.all(o.calls.map(userCall))) print(line);
  } else {
    for (const c of o.calls) print(await userCall(c));
  }

  if (o.checkPassthrough) {
    const out = {};
    try {
      const r = await client.readResource({ uri: 'orders://1182' }, reqOpts);
      out.resource = r.contents?.[0]?.text ?? null;
    } catch (err) {
      out.resource = errorLine(err);
    }
    try {
      const p = await client.getPrompt({ name: 'apology', arguments: { name: 'Ada' } }, reqOpts);
      const c = p.messages?.[0]?.content;
      out.prompt = c?.type === 'text' ? c.text : null;
    } catch (err) {
      out.prompt = errorLine(err);
    }
    const g = await callTool({ name: 'get_order', arguments: { order_id: '1182' } });
    out.get_order = 'error' in g ? g : (g.content[0] ?? null);
    print(out);
  }

  // Let a cancellation notification reach the server before the connection closes.
  if (aborted) await new Promise((r) => setTimeout(r, 300));

  if (o.url) {
    await transport.terminateSession().catch(() => {});
  }
  await client.close().catch(() => {});
  process.exit(0);
}

main().catch((err) => die(err?.stack ?? String(err)));
