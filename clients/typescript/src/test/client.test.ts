import assert from "node:assert/strict";
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import { createDreamClient, DreamApiError, type DreamClient } from "../index.js";

// dist/test/client.test.js -> the package root, then the repository root.
const packageRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const repoRoot = resolve(packageRoot, "..", "..");
const python = join(repoRoot, ".venv", "bin", "python");

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((ok) => server.listen(0, "127.0.0.1", ok));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((ok) => server.close(() => ok()));
  return port;
}

/** The server's environment: no inherited DREAM_* setting (no shared database, access
 * enforced, the default generator), and a fresh data directory. */
function serverEnv(dataDir: string): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(process.env)) {
    if (!name.startsWith("DREAM_")) env[name] = value;
  }
  env.DREAM_DATA_DIR = dataDir;
  return env;
}

const sleep = (ms: number) => new Promise<void>((ok) => setTimeout(ok, ms));

describe("against a live dream serve", () => {
  let dataDir: string;
  let server: ChildProcess;
  let baseUrl: string;
  let output = "";
  let client: DreamClient;

  before(async () => {
    dataDir = mkdtempSync(join(tmpdir(), "dream-ts-client-"));
    const port = await freePort();
    baseUrl = `http://127.0.0.1:${port}`;
    server = spawn(python, ["-m", "adapters.cli", "serve", "--port", String(port)], {
      cwd: repoRoot,
      env: serverEnv(dataDir),
      stdio: ["ignore", "pipe", "pipe"],
    });
    server.stdout?.on("data", (chunk) => (output += chunk));
    server.stderr?.on("data", (chunk) => (output += chunk));
    const deadline = Date.now() + 60_000;
    for (;;) {
      if (server.exitCode !== null) throw new Error(`dream serve exited:\n${output}`);
      try {
        const answer = await fetch(`${baseUrl}/healthz`);
        if (answer.ok) break;
      } catch {
        // not listening yet
      }
      if (Date.now() > deadline) throw new Error(`dream serve never answered /healthz:\n${output}`);
      await sleep(200);
    }
    const token = readFileSync(join(dataDir, "admin-token"), "utf8").trim();
    client = createDreamClient({ baseUrl, token });
  });

  after(async () => {
    if (server && server.exitCode === null) {
      const exited = new Promise<void>((ok) => server.once("exit", () => ok()));
      server.kill("SIGTERM");
      await Promise.race([exited, sleep(10_000)]);
      if (server.exitCode === null && server.signalCode === null) server.kill("SIGKILL");
    }
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  test("the main loop: record, remember, dream, approve, search", async () => {
    const scope = await client.scopes.create("team");
    assert.equal(scope.scope_id, "team");
    const listed = await client.scopes.list({ limit: 10 });
    assert.ok(listed.scopes.some((s) => s.scope_id === "team"));
    assert.equal((await client.scopes.status("team")).pending_candidates, 0);

    await client.sources.record("team", {
      source_type: "task",
      source_id: "deploy-1",
      attempt_id: "a1",
      text: "The rollout pulled a moved tag and failed; pinning the image by digest fixed it.",
    });
    await client.memories.create("team", { memory_id: "notes" });
    const entry = await client.memories.addEntry("team", "notes", {
      entry_id: "pin",
      kind: "task_record",
      text: "Pin container images by digest before rollout.",
      sources: [{ source_type: "task", source_id: "deploy-1" }],
    });
    assert.ok(entry.citation, "an added entry answers its citation");

    const requested = await client.runs.request("team", {
      operation: "refine_experience",
      idempotency_key: "ts",
      memory_citations: [entry.citation],
    });
    const run = await client.runs.waitUntilDone("team", requested.run_id, { timeoutMs: 60_000 });
    assert.equal(run.status, "succeeded", `run ended ${run.status}: ${run.error ?? ""}`);
    assert.equal(run.outcome, "proposed");
    assert.ok(run.candidate, "a proposed run names its candidate");

    const approved = await client.candidates.approve(
      "team",
      run.candidate.candidate_id,
      run.candidate.version,
    );
    assert.equal(approved.status, "approved");

    const found = await client.knowledge.search("team", { q: "digest" });
    assert.equal(found.items.length, 1);
    assert.equal(found.items[0]?.family, "experience");
  });

  test("a wrong token is refused as unauthorized", async () => {
    const stranger = createDreamClient({ baseUrl, token: "not-a-token" });
    await assert.rejects(stranger.scopes.get("team"), (error: unknown) => {
      assert.ok(error instanceof DreamApiError);
      assert.equal(error.status, 401);
      assert.equal(error.code, "unauthorized");
      return true;
    });
  });

  test("a missing scope answers its stable code", async () => {
    await assert.rejects(client.scopes.get("no-such-scope"), (error: unknown) => {
      assert.ok(error instanceof DreamApiError);
      assert.equal(error.status, 404);
      assert.equal(error.code, "scope_not_found");
      assert.ok(error.message.length > 0);
      return true;
    });
  });
});

type Script = (request: IncomingMessage, response: ServerResponse) => void;

/** A loopback server answering each request with the next scripted reply. */
async function scripted(replies: Script[]) {
  let count = 0;
  const server = createServer((request, response) => {
    const reply = replies[Math.min(count, replies.length - 1)]!;
    count += 1;
    request.resume();
    request.on("end", () => reply(request, response));
  });
  await new Promise<void>((ok) => server.listen(0, "127.0.0.1", ok));
  const { port } = server.address() as AddressInfo;
  return {
    baseUrl: `http://127.0.0.1:${port}`,
    requests: () => count,
    close: () => new Promise<void>((ok) => server.close(() => ok())),
  };
}

function json(status: number, body: unknown, headers: Record<string, string> = {}): Script {
  return (_request, response) => {
    response.writeHead(status, { "content-type": "application/json", ...headers });
    response.end(JSON.stringify(body));
  };
}

const scopeBody = { scope_id: "team", settings: {}, position: 1 };
const refusal = (code: string) => ({ error: { code, message: code.replace(/_/g, " "), details: {} } });

describe("retries against a scripted loopback server", () => {
  test("409 write_conflict is sent again, then succeeds", async () => {
    const fake = await scripted([json(409, refusal("write_conflict")), json(200, scopeBody)]);
    try {
      const client = createDreamClient({ baseUrl: fake.baseUrl, token: "t" });
      const scope = await client.scopes.get("team");
      assert.equal(scope.scope_id, "team");
      assert.equal(fake.requests(), 2);
    } finally {
      await fake.close();
    }
  });

  test("409 with another code is not sent again", async () => {
    const fake = await scripted([json(409, refusal("version_conflict")), json(200, scopeBody)]);
    try {
      const client = createDreamClient({ baseUrl: fake.baseUrl, token: "t" });
      await assert.rejects(client.scopes.get("team"), (error: unknown) => {
        assert.ok(error instanceof DreamApiError);
        assert.equal(error.status, 409);
        assert.equal(error.code, "version_conflict");
        assert.deepEqual(error.details, {});
        return true;
      });
      assert.equal(fake.requests(), 1);
    } finally {
      await fake.close();
    }
  });

  test("write_conflict re-sends are bounded", async () => {
    const fake = await scripted([json(409, refusal("write_conflict"))]);
    try {
      const client = createDreamClient({ baseUrl: fake.baseUrl, retry: { conflictPauseMs: 1 } });
      await assert.rejects(client.scopes.get("team"), { code: "write_conflict" });
      assert.equal(fake.requests(), 6);
    } finally {
      await fake.close();
    }
  });

  test("503 with Retry-After waits, then succeeds", async () => {
    const fake = await scripted([
      json(503, refusal("unavailable"), { "retry-after": "1" }),
      json(200, scopeBody),
    ]);
    try {
      const client = createDreamClient({ baseUrl: fake.baseUrl, token: "t" });
      const started = performance.now();
      const scope = await client.scopes.get("team");
      const elapsed = performance.now() - started;
      assert.equal(scope.scope_id, "team");
      assert.equal(fake.requests(), 2);
      assert.ok(elapsed >= 950, `waited only ${elapsed} ms`);
    } finally {
      await fake.close();
    }
  });

  test("503 without Retry-After is not sent again", async () => {
    const fake = await scripted([json(503, refusal("unavailable")), json(200, scopeBody)]);
    try {
      const client = createDreamClient({ baseUrl: fake.baseUrl, token: "t" });
      await assert.rejects(client.scopes.get("team"), { status: 503, code: "unavailable" });
      assert.equal(fake.requests(), 1);
    } finally {
      await fake.close();
    }
  });
});

test("the checked-in schema matches a fresh `npm run generate`", async () => {
  const dir = mkdtempSync(join(tmpdir(), "dream-ts-schema-"));
  try {
    const out = join(dir, "schema.d.ts");
    const cli = join(packageRoot, "node_modules", "openapi-typescript", "bin", "cli.js");
    await promisify(execFile)(process.execPath, [cli, "../../docs/openapi.json", "-o", out], {
      cwd: packageRoot,
    });
    const fresh = readFileSync(out, "utf8");
    const checkedIn = readFileSync(join(packageRoot, "src", "schema.d.ts"), "utf8");
    assert.ok(
      fresh === checkedIn,
      "src/schema.d.ts is stale: run `npm run generate` and commit the result",
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
