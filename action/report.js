// report.js - the crcr reporting action: a GitHub Actions JavaScript action that reports a
// downstream job's state (in_progress / completed) to a crcr relay's POST /github/callback.
//
// One file, no dependencies, no build step: only what Node 18 and later ship (fs, http, https,
// tls), so it runs on the runner's own Node (action.yml: `using: node24`) on every GitHub-hosted
// and self-hosted runner, any OS, without root. The body is the one `crcr report` (src/cli/report.c)
// builds, byte for byte: the dispatch's client_payload echoed (key order, every field, the
// relay's callback_token) or the nightly/periodic self-report envelope, plus a "workflow" object,
// serialised the way Python's json.dumps() writes it (what the upstream report_callback.py
// sends). docs/downstream.md describes that contract; tests/e2e/test_action.py checks both
// implementations produce the same bytes.
//
// The runner protocol, implemented here instead of with @actions/core:
//   - input `foo-bar` arrives as the environment variable INPUT_FOO-BAR (upper-cased, spaces
//     become '_', hyphens stay), holding the workflow's value or the action.yml default;
//   - a line `::add-mask::VALUE` on stdout makes the runner hide VALUE in the log from then on;
//   - a line `::error::MESSAGE` on stdout is shown as an error annotation (MESSAGE escaped:
//     '%' -> %25, CR -> %0D, LF -> %0A);
//   - the step fails when the process exits with a non-zero status.
// All output is written synchronously (fs.writeSync), so the mask line always precedes anything
// else that could mention the token, whatever kind of file or pipe stdout is.
'use strict';

const fs = require('node:fs');
const http = require('node:http');
const https = require('node:https');
const net = require('node:net');
const tls = require('node:tls');

// ------------------------------------------------------------------------------------------
// Limits and defaults: the same values as src/cli/report.h, src/cli/report.c, src/core/crcr_limits.h and
// src/json/json.c, so that both implementations accept and refuse the same inputs.

const UPSTREAM_CALLBACK_URL =
  'https://gwuj7w5coh4y4l66urspge6mnm0pwaxq.lambda-url.us-east-1.on.aws/github/callback/';
const DEFAULT_AUDIENCE = 'pytorch-cross-repo-ci-relay';
// The max-time default: room for the longest wait the relay asks for (a 429's Retry-After is at
// most 60 s, the rate window) plus the attempts around it; upstream's 10 s is shorter than that
// wait (docs/downstream.md). The same as `crcr report`'s REPORT_DEFAULT_MAX_TIME_S.
const DEFAULT_MAX_TIME_S = 120;
const MAX_MAX_TIME_S = 86400;
const MAX_EVENT_BYTES = 25 * 1024 * 1024;
const MAX_BODY_BYTES = 25 * 1024 * 1024;
const MAX_TEST_RESULTS_BYTES = 1024 * 1024;
const MAX_SHORT = 128; // conclusion, check run id
const MAX_TEXT = 4096; // artifact URL, workflow name, server URL
const MAX_DELIVERY_ID = 128;
const MAX_JOB_NAME = 256;
const MAX_REPO_NAME = 141; // owner (39) + '/' + repo (100) + 1: the length must stay below it
const MAX_URL = 2048; // the relay's own URL limit (config_url_allowed)
const MAX_REQUEST_TOKEN = 8192;
const MAX_OIDC_TOKEN = 16384;
const MAX_RESPONSE = 64 * 1024;
const ATTEMPT_TIMEOUT_MS = 30000;
const MAX_RETRY_WAIT_S = 60;
const REMINT_AFTER_MS = 4 * 60 * 1000; // GitHub's OIDC tokens live 5 minutes
const JSON_MAX_DEPTH = 64;
const JSON_MAX_VALUES = 500000;
const UPSTREAM_REPO = 'pytorch/pytorch';
// GitHub's check-run conclusions (src/model/vocab.c): a completed report must name one, in any
// case (the relay refuses anything else with 400).
const CONCLUSIONS = ['action_required', 'cancelled', 'failure', 'neutral', 'success', 'skipped',
  'stale', 'timed_out'];
const SCHEMA_VERSION = '1';
const PROG = 'crcr action';

// ------------------------------------------------------------------------------------------
// Runner protocol and output

// Secrets registered here are replaced by [REDACTED] in everything this file prints.
const secrets = [];

// Writes a line synchronously (a non-blocking pipe may refuse part of it for a moment).
function out(fd, text) {
  let buf = Buffer.from(text + '\n', 'utf8');
  while (buf.length > 0) {
    try {
      buf = buf.subarray(fs.writeSync(fd, buf));
    } catch (e) {
      if (e.code !== 'EAGAIN') throw e;
    }
  }
}

function escapeCommandData(s) {
  return s.replace(/%/g, '%25').replace(/\r/g, '%0D').replace(/\n/g, '%0A');
}

// Tells the runner to hide `value` in the log (the only line that ever holds a secret).
function addMask(value) {
  out(1, '::add-mask::' + escapeCommandData(value));
}

// An error annotation; the step fails because main() then returns 1.
function annotateError(message) {
  out(1, '::error::' + escapeCommandData(scrub(message)));
}

function info(message) {
  out(1, PROG + ': ' + scrub(message));
}

// `text` with the registered secrets replaced by [REDACTED], nothing else changed.
function scrubSecrets(text) {
  let s = String(text);
  for (const secret of secrets) s = s.split(secret).join('[REDACTED]');
  return s;
}

// `text` with the registered secrets, JWT-shaped strings and bearer credentials removed (a relay
// or proxy that echoes the request must not make the log show a token).
function scrub(text) {
  let s = scrubSecrets(text);
  s = s.replace(/eyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_.-]*/g, '[REDACTED-JWT]');
  return s.replace(/\b(bearer)( +)[A-Za-z0-9._~+/=-]{8,}/gi, '$1$2[REDACTED]');
}

// The value of input `name`; '' when the runner did not set it.
function getInput(name) {
  const v = process.env['INPUT_' + name.replace(/ /g, '_').toUpperCase()];
  return v === undefined ? '' : v;
}

// A failure reported as `::error::message`, exit status 1.
class Failure extends Error {}

// ------------------------------------------------------------------------------------------
// Small helpers

// Trims the white space src/cli/report.c trims (C isspace in the "C" locale), nothing else.
function trimC(s) {
  return String(s).replace(/^[ \t\n\r\f\v]+|[ \t\n\r\f\v]+$/g, '');
}

function byteLength(s) {
  return Buffer.byteLength(s, 'utf8');
}

// True when s is 1..max ASCII digits.
function allDigits(s, max) {
  return typeof s === 'string' && s.length >= 1 && s.length <= max && /^[0-9]+$/.test(s);
}

// True when s can go in an HTTP header or request line: 1..max bytes, no space, control
// character or non-ASCII byte.
function headerSafe(s, max) {
  return s.length >= 1 && s.length <= max && /^[\x21-\x7e]+$/.test(s);
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function monoMs() {
  return performance.now();
}

// ------------------------------------------------------------------------------------------
// JSON with jansson's rules (what `crcr report` parses with): the same documents are refused
// (duplicate keys, \u0000, lone surrogates, integers beyond int64, reals that overflow, nesting
// deeper than 64), and values keep what Python's json.dumps() needs to reproduce them: objects
// are Maps (insertion order, also for keys like "1"), integers BigInts, reals Numbers.

class JsonError extends Error {}

// jv_prescan() of src/json/json.c: nesting depth and value count, counted on the raw text.
function prescanOk(s) {
  let depth = 0;
  let values = 0;
  let inValue = false;
  for (let i = 0; i < s.length; i++) {
    const c = s[i];
    if (c === '"') {
      values++;
      inValue = false;
      for (i++; i < s.length && s[i] !== '"'; i++) if (s[i] === '\\') i++;
    } else if (c === '{' || c === '[') {
      values++;
      inValue = false;
      if (++depth > JSON_MAX_DEPTH) return false;
    } else if (c === '}' || c === ']') {
      inValue = false;
      if (depth > 0) depth--;
    } else if (c === ',' || c === ':' || c === ' ' || c === '\n' || c === '\r' || c === '\t') {
      inValue = false;
    } else if (!inValue) {
      inValue = true;
      values++;
    }
    if (values > JSON_MAX_VALUES) return false;
  }
  return true;
}

const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;
const NUMBER_RE = /-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?/y;
const HEX4_RE = /^[0-9a-fA-F]{4}$/;

// A recursive-descent parser; recursion is bounded by the prescan's depth limit.
class JsonParser {
  constructor(text) {
    this.s = text;
    this.i = 0;
  }

  fail(why) {
    throw new JsonError(why + ' at offset ' + this.i);
  }

  ws() {
    const s = this.s;
    while (this.i < s.length) {
      const c = s[this.i];
      if (c !== ' ' && c !== '\t' && c !== '\n' && c !== '\r') break;
      this.i++;
    }
  }

  value() {
    const c = this.s[this.i];
    let v;
    if (c === '{') return this.object();
    if (c === '[') return this.array();
    if (c === '"') return this.string();
    if (c === '-' || (c >= '0' && c <= '9')) v = this.number();
    else v = this.literal();
    // jansson quirk, kept as src/json/json.c keeps it: the character after a number or literal is
    // read and pushed back, and a pushed-back NUL is lost, so one NUL there is skipped.
    if (this.s[this.i] === '\u0000') this.i++;
    return v;
  }

  literal() {
    for (const [word, v] of [['true', true], ['false', false], ['null', null]]) {
      if (this.s.startsWith(word, this.i)) {
        this.i += word.length;
        if (/[A-Za-z]/.test(this.s[this.i] || '')) this.fail('invalid token');
        return v;
      }
    }
    return this.fail('invalid token');
  }

  number() {
    NUMBER_RE.lastIndex = this.i;
    const m = NUMBER_RE.exec(this.s);
    if (!m) this.fail('invalid number');
    const text = m[0];
    this.i += text.length;
    if (/[.eE]/.test(text)) {
      const d = Number(text);
      if (!Number.isFinite(d)) this.fail('real number overflow');
      return d;
    }
    const n = BigInt(text);
    if (n < INT64_MIN || n > INT64_MAX) this.fail('integer out of range');
    return n;
  }

  hex4(at) {
    const h = this.s.slice(at, at + 4);
    return HEX4_RE.test(h) ? parseInt(h, 16) : -1;
  }

  // One escape sequence at this.i (the backslash); returns the text it stands for.
  escape() {
    const e = this.s[this.i + 1];
    const simple = { '"': '"', '\\': '\\', '/': '/', b: '\b', f: '\f', n: '\n', r: '\r', t: '\t' };
    if (e !== 'u') {
      if (!(e in simple)) this.fail('invalid escape');
      this.i += 2;
      return simple[e];
    }
    const cp = this.hex4(this.i + 2);
    if (cp < 0) this.fail('invalid escape');
    if (cp === 0) this.fail('\\u0000 is not allowed');
    if (cp >= 0xdc00 && cp <= 0xdfff) this.fail('lone low surrogate');
    if (cp < 0xd800 || cp > 0xdbff) {
      this.i += 6;
      return String.fromCharCode(cp);
    }
    const lo = this.s.startsWith('\\u', this.i + 6) ? this.hex4(this.i + 8) : -1;
    if (lo < 0xdc00 || lo > 0xdfff) this.fail('invalid surrogate pair');
    this.i += 12;
    return String.fromCharCode(cp, lo);
  }

  string() {
    const s = this.s;
    const parts = [];
    this.i++; // the opening quote
    let run = this.i;
    for (;;) {
      if (this.i >= s.length) this.fail('unterminated string');
      const c = s.charCodeAt(this.i);
      if (c === 0x22) break;
      if (c < 0x20) this.fail('control character in string');
      if (c !== 0x5c) {
        this.i++;
        continue;
      }
      parts.push(s.slice(run, this.i), this.escape());
      run = this.i;
    }
    parts.push(s.slice(run, this.i));
    this.i++; // the closing quote
    return parts.join('');
  }

  // After a member or element: ',' (true) or the closing character (false).
  more(close) {
    this.ws();
    const c = this.s[this.i];
    if (c === ',') {
      this.i++;
      this.ws();
      return true;
    }
    if (c !== close) this.fail("',' or '" + close + "' expected");
    this.i++;
    return false;
  }

  object() {
    const m = new Map();
    this.i++;
    this.ws();
    if (this.s[this.i] === '}') {
      this.i++;
      return m;
    }
    do {
      if (this.s[this.i] !== '"') this.fail('string expected');
      const key = this.string();
      if (m.has(key)) this.fail('duplicate object key');
      this.ws();
      if (this.s[this.i] !== ':') this.fail("':' expected");
      this.i++;
      this.ws();
      m.set(key, this.value());
    } while (this.more('}'));
    return m;
  }

  array() {
    const a = [];
    this.i++;
    this.ws();
    if (this.s[this.i] === ']') {
      this.i++;
      return a;
    }
    do a.push(this.value());
    while (this.more(']'));
    return a;
  }
}

// Parses `text` (already decoded from well-formed UTF-8); throws JsonError.
function parseJson(text) {
  if (!prescanOk(text)) throw new JsonError('JSON nesting or size limit exceeded');
  const p = new JsonParser(text);
  p.ws();
  if (p.i >= text.length) p.fail('unexpected end of input');
  const v = p.value();
  p.ws();
  if (p.i !== text.length) p.fail('end of input expected');
  return v;
}

// Decodes bytes as UTF-8, refusing ill-formed input as jansson does (a BOM is kept, and then
// refused by the parser like any other stray character).
function decodeUtf8(bytes) {
  try {
    return new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(bytes);
  } catch (e) {
    throw new JsonError('invalid UTF-8');
  }
}

// ------------------------------------------------------------------------------------------
// Python json.dumps() serialisation (ensure_ascii, ", " and ": " separators, float repr)

// A string literal: printable ASCII kept, the short escapes, everything else as \uXXXX of its
// UTF-16 code units (a character beyond U+FFFF becomes its surrogate pair), lower-case hex.
function pyString(s) {
  const short = { '"': '\\"', '\\': '\\\\', '\n': '\\n', '\r': '\\r', '\t': '\\t', '\b': '\\b', '\f': '\\f' };
  return '"' + s.replace(/[^\x20-\x21\x23-\x5b\x5d-\x7e]/g, (c) =>
    short[c] || '\\u' + c.charCodeAt(0).toString(16).padStart(4, '0')) + '"';
}

// The shortest digits that read back to d (> 0) and the decimal exponent of the first one.
function shortestDigits(d) {
  const [mant, exp] = d.toExponential().split('e'); // e.g. "1.2345e+2": shortest round-trip
  const digits = mant.replace('.', '').replace(/0+$/, '') || '0';
  return { digits, e10: parseInt(exp, 10) };
}

// A real as Python's repr() writes it: positional for decimal exponents -4..15 (with ".0" when
// integral), else "d.ddde+XX" with at least two exponent digits.
function pyFloat(d) {
  if (d < 0 || Object.is(d, -0)) return '-' + pyFloat(-d);
  if (d === 0) return '0.0';
  const { digits, e10 } = shortestDigits(d);
  if (e10 < -4 || e10 >= 16) {
    const frac = digits.length > 1 ? '.' + digits.slice(1) : '';
    const sign = e10 < 0 ? '-' : '+';
    return digits[0] + frac + 'e' + sign + String(Math.abs(e10)).padStart(2, '0');
  }
  const point = e10 + 1; // digits before the decimal point
  if (point <= 0) return '0.' + '0'.repeat(-point) + digits;
  if (point >= digits.length) return digits + '0'.repeat(point - digits.length) + '.0';
  return digits.slice(0, point) + '.' + digits.slice(point);
}

// Appends the serialisation of v to `parts`.
function pyDump(v, parts) {
  if (v instanceof Map) {
    parts.push('{');
    let first = true;
    for (const [k, val] of v) {
      parts.push((first ? '' : ', ') + pyString(k) + ': ');
      first = false;
      pyDump(val, parts);
    }
    parts.push('}');
  } else if (Array.isArray(v)) {
    parts.push('[');
    v.forEach((val, i) => {
      if (i > 0) parts.push(', ');
      pyDump(val, parts);
    });
    parts.push(']');
  } else if (typeof v === 'string') {
    parts.push(pyString(v));
  } else if (typeof v === 'bigint') {
    parts.push(v.toString());
  } else if (typeof v === 'number') {
    parts.push(pyFloat(v));
  } else {
    parts.push(v === true ? 'true' : v === false ? 'false' : 'null');
  }
}

function pyDumps(v) {
  const parts = [];
  pyDump(v, parts);
  return parts.join('');
}

// ------------------------------------------------------------------------------------------
// The body (report_build_body() of src/cli/report.c)

// The inputs, trimmed where `crcr report` trims its options.
function readOptions() {
  return {
    status: getInput('status'),
    conclusion: trimC(getInput('conclusion')),
    jobName: getInput('job-name'),
    testResults: trimC(getInput('test-results')),
    artifactUrl: trimC(getInput('artifact-url')),
    deliveryId: trimC(getInput('delivery-id')),
    eventType: trimC(getInput('event-type')),
    checkRunId: trimC(getInput('check-run-id')) || trimC(process.env.CRCR_CHECK_RUN_ID || ''),
    audience: getInput('audience') || DEFAULT_AUDIENCE,
    maxTimeS: parseMaxTime(getInput('max-time')),
    dryRun: parseBoolean('dry-run'),
  };
}

function parseMaxTime(text) {
  const t = trimC(text);
  if (t === '') return DEFAULT_MAX_TIME_S;
  const v = allDigits(t, 18) ? Number(t) : 0;
  if (v < 1 || v > MAX_MAX_TIME_S) {
    throw new Failure('max-time must be a whole number of seconds, 1 to ' + MAX_MAX_TIME_S);
  }
  return v;
}

// A boolean input as @actions/core reads one (true/True/TRUE, false/False/FALSE; '' is false).
function parseBoolean(name) {
  const v = trimC(getInput(name));
  if (['true', 'True', 'TRUE'].includes(v)) return true;
  if (['', 'false', 'False', 'FALSE'].includes(v)) return false;
  throw new Failure(`${name} must be true or false, got '${v.slice(0, 64)}'`);
}

function isSelfReport(o) {
  return o.deliveryId !== '' && o.eventType !== '';
}

// check_opts() of src/cli/report.c: what can be checked on the inputs alone.
function checkOptions(o) {
  if (o.status === '') throw new Failure('the status input is required (in_progress or completed)');
  const inProgress = o.status === 'in_progress';
  if (!inProgress && o.status !== 'completed') {
    throw new Failure(`status must be 'in_progress' or 'completed', got '${o.status.slice(0, 64)}'`);
  }
  if ((o.deliveryId !== '') !== (o.eventType !== '')) {
    throw new Failure('delivery-id and event-type must be given together (nightly/periodic self-report)');
  }
  if (isSelfReport(o)) {
    if (o.eventType !== 'nightly' && o.eventType !== 'periodic') {
      throw new Failure(`event-type must be 'nightly' or 'periodic', got '${o.eventType.slice(0, 64)}'`);
    }
    if (inProgress) throw new Failure('nightly/periodic callbacks require status completed');
    if (byteLength(o.deliveryId) > MAX_DELIVERY_ID) {
      throw new Failure(`delivery-id must be at most ${MAX_DELIVERY_ID} bytes`);
    }
  }
  if (!inProgress && o.conclusion === '') {
    throw new Failure('conclusion is required with status completed (e.g. ${{ job.status }})');
  }
  if (!inProgress && !CONCLUSIONS.includes(o.conclusion.toLowerCase())) {
    throw new Failure(`conclusion must be one of ${CONCLUSIONS.join(', ')} with status completed, ` +
      `got '${o.conclusion.slice(0, 64)}'`);
  }
  const limits = [
    [o.conclusion, MAX_SHORT, 'conclusion'],
    [o.jobName, MAX_JOB_NAME, 'job-name'],
    [o.checkRunId, MAX_SHORT, 'check-run-id'],
    [o.artifactUrl, MAX_TEXT, 'artifact-url'],
    [o.testResults, MAX_TEST_RESULTS_BYTES, 'test-results'],
  ];
  for (const [value, max, name] of limits) {
    if (byteLength(value) > max) throw new Failure(`${name} must be at most ${max} bytes`);
  }
  if (o.testResults !== '') parseTestResults(o.testResults);
}

function parseTestResults(text) {
  try {
    return parseJson(text);
  } catch (e) {
    if (e instanceof JsonError) throw new Failure('test-results is not valid JSON: ' + e.message);
    throw e;
  }
}

// The GitHub Actions environment the body needs.
function readEnv() {
  const e = process.env;
  return {
    eventPath: e.GITHUB_EVENT_PATH,
    runId: e.GITHUB_RUN_ID,
    runAttempt: e.GITHUB_RUN_ATTEMPT,
    workflow: e.GITHUB_WORKFLOW,
    job: e.GITHUB_JOB,
    serverUrl: e.GITHUB_SERVER_URL,
    repository: e.GITHUB_REPOSITORY,
    tokenUrl: e.ACTIONS_ID_TOKEN_REQUEST_URL,
    tokenSecret: e.ACTIONS_ID_TOKEN_REQUEST_TOKEN,
  };
}

// check_env() of src/cli/report.c; returns the job name to report.
function checkEnv(o, env) {
  if (!allDigits(env.runId, 32)) {
    throw new Failure(
      'GITHUB_RUN_ID is not set or not a number: the action runs inside a GitHub Actions job');
  }
  if (!allDigits(env.runAttempt, 16)) throw new Failure('GITHUB_RUN_ATTEMPT is not set or not a number');
  if (env.workflow === undefined || byteLength(env.workflow) > MAX_TEXT) {
    throw new Failure('GITHUB_WORKFLOW is not set');
  }
  const repo = env.repository || '';
  if (repo === '' || byteLength(repo) >= MAX_REPO_NAME || !repo.includes('/')) {
    throw new Failure('GITHUB_REPOSITORY is not set or not owner/repo');
  }
  if (env.serverUrl !== undefined && byteLength(env.serverUrl) > MAX_TEXT) {
    throw new Failure('GITHUB_SERVER_URL is too long');
  }
  const job = o.jobName !== '' ? o.jobName : env.job || '';
  if (job === '') throw new Failure('no job name: give the job-name input or set GITHUB_JOB');
  if (byteLength(job) > MAX_JOB_NAME) {
    throw new Failure(`the job name must be at most ${MAX_JOB_NAME} bytes`);
  }
  return job;
}

// "YYYY-MM-DDTHH:MM:SSZ" (UTC, whole seconds) of a Unix time in milliseconds.
function iso8601(ms) {
  return new Date(Math.floor(ms / 1000) * 1000).toISOString().slice(0, 19) + 'Z';
}

// The "workflow" object; key order is part of the contract.
function buildWorkflow(o, env, job, nowMs) {
  const inProgress = o.status === 'in_progress';
  const now = iso8601(nowMs);
  const server = env.serverUrl ? env.serverUrl : 'https://github.com';
  const wf = new Map([
    ['schema_version', SCHEMA_VERSION],
    ['status', o.status],
    ['conclusion', inProgress ? null : o.conclusion],
    ['name', env.workflow],
    ['url', `${server}/${env.repository}/actions/runs/${env.runId}`],
    ['run_attempt', env.runAttempt],
    ['job_name', job],
    ['check_run_id', o.checkRunId || `${env.runId}-${env.runAttempt}`],
    ['run_id', env.runId],
    ['started_at', inProgress || isSelfReport(o) ? now : null],
    ['completed_at', inProgress ? null : now],
  ]);
  if (o.testResults !== '') wf.set('test_results', parseTestResults(o.testResults));
  if (o.artifactUrl !== '') wf.set('artifact_url', o.artifactUrl);
  return wf;
}

// The self-report envelope of the upstream report_callback.py.
function selfReportRoot(o) {
  const payload = new Map([
    ['repository', new Map([['full_name', UPSTREAM_REPO]])],
    ['head_sha', o.deliveryId],
  ]);
  return new Map([
    ['event_type', o.eventType],
    ['delivery_id', o.deliveryId],
    ['payload', payload],
  ]);
}

// client_payload of the event file (the repository_dispatch that started this workflow).
function dispatchRoot(eventPath) {
  if (!eventPath) {
    throw new Failure('GITHUB_EVENT_PATH is not set: the action runs inside a GitHub Actions job');
  }
  let event;
  try {
    event = parseJson(decodeUtf8(readFileCapped(eventPath, MAX_EVENT_BYTES)));
  } catch (e) {
    if (e instanceof JsonError) throw new Failure('GITHUB_EVENT_PATH: not valid JSON: ' + e.message);
    throw e;
  }
  const root = event instanceof Map ? event.get('client_payload') : undefined;
  if (!(root instanceof Map)) {
    throw new Failure(
      'GITHUB_EVENT_PATH: the event has no client_payload object; the action belongs in a workflow ' +
        'run by repository_dispatch (or give delivery-id and event-type for a nightly/periodic ' +
        'self-report)');
  }
  return root;
}

function readFileCapped(path, max) {
  let data;
  try {
    data = fs.readFileSync(path);
  } catch (e) {
    throw new Failure(`GITHUB_EVENT_PATH ${path}: ${e.message}`);
  }
  if (data.length > max) throw new Failure(`GITHUB_EVENT_PATH ${path}: larger than ${max} bytes`);
  return data;
}

// The request body (a string of ASCII characters: json.dumps escapes everything else). The
// dispatch's callback_token is masked like a secret from here on (a dry-run prints the body).
function buildBody(o, env, nowMs) {
  checkOptions(o);
  const job = checkEnv(o, env);
  const root = isSelfReport(o) ? selfReportRoot(o) : dispatchRoot(env.eventPath);
  const token = root.get('callback_token');
  if (typeof token === 'string' && token !== '') {
    addMask(token);
    secrets.push(token);
  }
  root.set('workflow', buildWorkflow(o, env, job, nowMs)); // an existing key keeps its place
  const body = pyDumps(root);
  if (body.length > MAX_BODY_BYTES) {
    throw new Failure(`the callback body is larger than ${MAX_BODY_BYTES} bytes`);
  }
  return body;
}

// ------------------------------------------------------------------------------------------
// URLs (config_url_allowed() of src/config/config.c)

// True for localhost, a dotted-quad 127.x.x.x and ::1 (any spelling).
function isLoopbackHost(host) {
  if (host.length === 0 || host.length >= 64) return false;
  if (host.toLowerCase() === 'localhost') return true;
  if (net.isIPv4(host)) return host.split('.')[0] === '127';
  if (net.isIPv6(host)) return new URL('http://[' + host + ']/').hostname === '[::1]';
  return false;
}

// The host of an http(s) URL, or null when the URL is unusable (the relay's url_split()).
function urlHost(url) {
  if (url.length > MAX_URL || /[\x00-\x20\x7f\\]/.test(url)) return null;
  const m = /^(https?):\/\/([^/?#]*)/i.exec(url);
  if (!m) return null;
  const authority = m[2].slice(m[2].lastIndexOf('@') + 1);
  const hp = /^(?:\[([^\]]*)\]|([^:[\]]*))(?::([0-9]{1,5}))?$/.exec(authority);
  if (!hp || (hp[3] !== undefined && Number(hp[3]) > 65535)) return null;
  const host = hp[1] !== undefined ? hp[1] : hp[2];
  return host === '' ? null : { https: m[1].toLowerCase() === 'https', host };
}

// https:// anywhere, http:// only for a loopback host.
function urlAllowed(url) {
  const u = urlHost(url);
  return u !== null && (u.https || isLoopbackHost(u.host));
}

// The callback URL: the input, else $CRCR_CALLBACK_URL, else the upstream relay's (the input's
// default, which $CRCR_CALLBACK_URL also replaces). Trailing '/' removed, as upstream does.
// Returns {url, from}: from is 'callback-url', 'CRCR_CALLBACK_URL' or 'default'.
function callbackUrl() {
  const strip = (u) => u.replace(/\/+$/, '');
  let url = strip(trimC(getInput('callback-url')));
  let from = 'callback-url';
  const fromEnv = strip(trimC(process.env.CRCR_CALLBACK_URL || ''));
  if (url === strip(UPSTREAM_CALLBACK_URL)) from = 'default'; // the runner passes the default
  if ((url === '' || from === 'default') && fromEnv !== '') {
    url = fromEnv;
    from = 'CRCR_CALLBACK_URL';
  }
  if (url === '') {
    url = strip(UPSTREAM_CALLBACK_URL);
    from = 'default';
  }
  if (!headerSafe(url, MAX_URL)) {
    throw new Failure(`callback-url must be at most ${MAX_URL} bytes, without spaces or control characters`);
  }
  if (/^[a-z][a-z0-9+.-]*:\/\/[^/?#]*@/i.test(url)) {
    // Never sent nor printed: the relay authenticates callbacks by their OIDC token only.
    throw new Failure('callback-url must not contain credentials (user:password@)');
  }
  if (!urlAllowed(url)) throw new Failure('callback-url must be https:// (http:// only for loopback hosts)');
  return { url, from };
}

// Where the report went, for messages: the default named as such, since a forgotten callback-url
// sends reports to the upstream relay, which knows nothing of a crcr relay's dispatches.
function urlNote(run) {
  if (run.urlFrom !== 'default') return '';
  return ` (${shownUrl(run.url)} is the default callback-url, the upstream relay's: neither callback-url ` +
    'nor CRCR_CALLBACK_URL was given; set callback-url to https://<your relay>/github/callback)';
}

// What is printed of the callback URL: its origin and path (no query, no fragment).
function shownUrl(url) {
  try {
    const u = new URL(url);
    return u.origin + u.pathname;
  } catch (e) {
    return '(unprintable URL)';
  }
}

// ------------------------------------------------------------------------------------------
// HTTP: one request per attempt on a fresh connection, through the proxy the environment
// names (https_proxy / HTTPS_PROXY, http_proxy / HTTP_PROXY, no_proxy / NO_PROXY, as curl and
// @actions/http-client read them; only http:// proxies, https targets tunnel with CONNECT).

// True when no_proxy names the host (or host:port) of `u`.
function proxyBypassed(u) {
  const list = process.env.no_proxy || process.env.NO_PROXY || '';
  const host = u.hostname.replace(/^\[|\]$/g, '').toLowerCase();
  const port = u.port || (u.protocol === 'https:' ? '443' : '80');
  return list.split(/[\s,]+/).some((raw) => {
    const entry = raw.trim().toLowerCase().replace(/^\*?\./, '');
    if (entry === '') return false;
    if (entry === '*') return true;
    const hp = /^([^:]*|\[[^\]]*\]):([0-9]+)$/.exec(entry); // host:port, [v6]:port
    if (hp && hp[2] !== port) return false;
    const eHost = (hp ? hp[1] : entry).replace(/^\[|\]$/g, '');
    return host === eHost || host.endsWith('.' + eHost);
  });
}

// The proxy URL to use for `u`, or null.
function proxyFor(u) {
  const e = process.env;
  const raw = u.protocol === 'https:' ? e.https_proxy || e.HTTPS_PROXY : e.http_proxy || e.HTTP_PROXY;
  if (!raw || proxyBypassed(u)) return null;
  const p = new URL(/^[a-z][a-z0-9+.-]*:\/\//i.test(raw) ? raw : 'http://' + raw);
  if (p.protocol !== 'http:') throw new Failure('only http:// proxies are supported, got ' + p.protocol);
  return p;
}

function proxyAuthHeaders(p) {
  if (!p.username) return {};
  const cred = decodeURIComponent(p.username) + ':' + decodeURIComponent(p.password);
  return { 'Proxy-Authorization': 'Basic ' + Buffer.from(cred).toString('base64') };
}

function bareHost(u) {
  return u.hostname.replace(/^\[|\]$/g, '');
}

// A transport failure a retry cannot fix: the server's certificate is not trusted.
function isPermanent(err) {
  return /CERT|SELF_SIGNED|VERIFY|ERR_TLS/.test((err && err.code) || '');
}

function describe(err) {
  return (err && (err.code ? err.code + ': ' : '') + err.message) || String(err);
}

// Collects an answer (at most MAX_RESPONSE bytes of body are kept).
function readAnswer(res, settle) {
  const chunks = [];
  let kept = 0;
  res.on('data', (chunk) => {
    if (kept < MAX_RESPONSE) {
      chunks.push(chunk.subarray(0, MAX_RESPONSE - kept));
      kept += Math.min(chunk.length, MAX_RESPONSE - kept);
    }
  });
  res.on('end', () => settle({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks) }));
  res.on('error', (err) => settle({ error: describe(err) }));
}

// One request. Resolves to {status, headers, body} or {error, permanent}; never rejects.
function httpRequest(method, url, headers, body, timeoutMs) {
  let u;
  try {
    u = new URL(url);
  } catch (e) {
    return Promise.resolve({ error: 'bad URL: ' + e.message, permanent: true });
  }
  return new Promise((resolve) => {
    const pending = [];
    let timer = null;
    let settled = false;
    const settle = (result) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      pending.forEach((r) => r.destroy());
      resolve(result);
    };
    const onError = (err) => settle({ error: describe(err), permanent: isPermanent(err) });
    timer = setTimeout(() => settle({ error: `no answer within ${Math.ceil(timeoutMs / 1000)} s` }),
      Math.max(1, timeoutMs));
    const send = (mod, options) => {
      const req = mod.request(options, (res) => readAnswer(res, settle));
      pending.push(req);
      req.on('error', onError);
      req.end(body);
    };
    let proxy;
    try {
      proxy = proxyFor(u);
    } catch (e) {
      settle({ error: e.message, permanent: true });
      return;
    }
    const port = Number(u.port) || (u.protocol === 'https:' ? 443 : 80);
    const target = { method, host: bareHost(u), port, path: u.pathname + u.search, headers };
    if (!proxy) {
      send(u.protocol === 'https:' ? https : http, { ...target, agent: false });
    } else if (u.protocol === 'http:') {
      // Absolute-form request line through the proxy.
      send(http, { method, host: bareHost(proxy), port: Number(proxy.port) || 80, path: u.href,
        headers: { ...headers, Host: u.host, ...proxyAuthHeaders(proxy) }, agent: false });
    } else {
      const servername = net.isIP(target.host) ? undefined : target.host;
      tunnel(proxy, target, pending, settle, onError, (socket) => send(https, { ...target,
        createConnection: () => tls.connect({ socket, servername, host: target.host }) }));
    }
  });
}

// Opens a CONNECT tunnel to target through the proxy and hands the socket to `then`.
function tunnel(proxy, target, pending, settle, onError, then) {
  const authority = (net.isIPv6(target.host) ? `[${target.host}]` : target.host) + ':' + target.port;
  const req = http.request({ method: 'CONNECT', host: bareHost(proxy), port: Number(proxy.port) || 80,
    path: authority, headers: { Host: authority, ...proxyAuthHeaders(proxy) }, agent: false });
  pending.push(req);
  req.on('error', onError);
  req.on('connect', (res, socket) => {
    if (res.statusCode !== 200) {
      socket.destroy();
      settle({ error: `the proxy refused CONNECT ${authority}: HTTP ${res.statusCode}` });
      return;
    }
    pending.push(socket);
    then(socket);
  });
  req.end();
}

// Retry-After as seconds from now (delta-seconds or an HTTP date, at most MAX_RETRY_WAIT_S);
// -1 when absent or unreadable.
function retryAfterSeconds(headers) {
  const v = trimC((headers && headers['retry-after']) || '');
  if (v === '' || v.length > 64) return -1;
  if (/^[0-9]+$/.test(v)) return v.length > 18 ? MAX_RETRY_WAIT_S : Math.min(Number(v), MAX_RETRY_WAIT_S);
  const when = Date.parse(v);
  if (Number.isNaN(when)) return -1;
  const delta = Math.floor(when / 1000) - Math.floor(Date.now() / 1000);
  return Math.max(0, Math.min(delta, MAX_RETRY_WAIT_S));
}

// Seconds before retry number `attempt` (0 first): Retry-After when given, else 1, 2, 4, ... 60.
function retryDelaySeconds(attempt, retryAfter) {
  if (retryAfter >= 0) return Math.min(retryAfter, MAX_RETRY_WAIT_S);
  return attempt >= 6 ? MAX_RETRY_WAIT_S : Math.min(2 ** attempt, MAX_RETRY_WAIT_S);
}

function retryableStatus(status) {
  return status === 429 || (status >= 500 && status <= 599);
}

// ------------------------------------------------------------------------------------------
// Minting the OIDC token and sending (send_with_retries() of src/cli/report.c)

const OK = 'ok';
const RETRY = 'retry';
const FAIL = 'fail';

// curl_easy_escape(): everything but ALPHA / DIGIT / - . _ ~ percent-encoded, per UTF-8 byte.
function curlEscape(s) {
  return Array.from(Buffer.from(s, 'utf8'), (b) =>
    /[A-Za-z0-9\-._~]/.test(String.fromCharCode(b)) ? String.fromCharCode(b)
      : '%' + b.toString(16).toUpperCase().padStart(2, '0')).join('');
}

// The time the next request may take: what is left of the budget, at most one attempt's worth.
function attemptTimeoutMs(run) {
  return Math.min(ATTEMPT_TIMEOUT_MS, Math.floor(run.deadline - monoMs()));
}

// GET <ACTIONS_ID_TOKEN_REQUEST_URL>&audience=<aud> with the request token; the answer is
// {"value": "<jwt>"}. The token is masked before anything else happens with it.
async function mint(run) {
  const sep = run.env.tokenUrl.includes('?') ? '&' : '?';
  const url = run.env.tokenUrl + sep + 'audience=' + curlEscape(run.o.audience);
  const r = await httpRequest('GET', url, baseHeaders({ Authorization: 'Bearer ' + run.env.tokenSecret }),
    undefined, attemptTimeoutMs(run));
  run.retryAfter = r.error ? -1 : retryAfterSeconds(r.headers);
  if (r.error) {
    run.why = 'OIDC token request failed: ' + r.error;
    return r.permanent ? FAIL : RETRY;
  }
  if (r.status < 200 || r.status > 299) {
    run.why = `OIDC token request answered HTTP ${r.status}`;
    return retryableStatus(r.status) ? RETRY : FAIL;
  }
  let value;
  try {
    value = JSON.parse(r.body.toString('utf8')).value;
  } catch (e) {
    value = undefined;
  }
  if (typeof value !== 'string' || !headerSafe(value, MAX_OIDC_TOKEN)) {
    run.why = 'the OIDC token endpoint\'s answer has no usable "value"';
    return FAIL;
  }
  addMask(value);
  secrets.push(value);
  run.jwt = value;
  run.mintedAt = monoMs();
  return OK;
}

function baseHeaders(extra) {
  return { Accept: 'application/json', 'User-Agent': 'crcr-action', ...extra };
}

// POSTs the body once; the relay's answer is kept in run.answer.
async function post(run) {
  const headers = baseHeaders({
    Authorization: 'Bearer ' + run.jwt,
    'Content-Type': 'application/json',
    'Content-Length': String(run.body.length),
  });
  const r = await httpRequest('POST', run.url, headers, run.body, attemptTimeoutMs(run));
  run.retryAfter = r.error ? -1 : retryAfterSeconds(r.headers);
  if (r.error) {
    run.why = 'callback request failed: ' + r.error;
    run.unreachable = !r.permanent; // refused, unresolved, timed out (not a TLS trust failure)
    return r.permanent ? FAIL : RETRY;
  }
  run.unreachable = false;
  run.answer = { status: r.status, text: r.body.toString('utf8') };
  run.why = `the relay answered HTTP ${r.status}`;
  if (r.status >= 200 && r.status <= 299) return OK;
  return retryableStatus(r.status) ? RETRY : FAIL;
}

// The relay's {"detail": ...}, else its answer as text (first 2000 characters).
function answerDetail(text) {
  try {
    const doc = JSON.parse(text);
    if (doc && typeof doc.detail === 'string') return doc.detail;
  } catch (e) {
    // not JSON: show the text
  }
  return trimC(text).slice(0, 2000);
}

// The final failure as an error annotation: the relay's answer when there was one.
function reportFailure(run) {
  if (run.answer) {
    const detail = answerDetail(run.answer.text);
    annotateError(`Callback server returned HTTP ${run.answer.status}.` + (detail ? ' ' + detail : '') +
      urlNote(run));
  } else if (run.unreachable) {
    // No answer at all (ECONNREFUSED, ENOTFOUND, a timeout...): say where it was sent.
    annotateError(`${run.why}: is the relay reachable at ${shownUrl(run.url)}?` + urlNote(run));
  } else {
    annotateError(run.why);
  }
  return 1;
}

// The attempt loop: mint (again when the token is old), POST, retry 429 / 5xx / transport
// errors within the max-time budget (crcr's callbacks are idempotent, so a retry is safe).
async function sendWithRetries(run) {
  for (let attempt = 0; ; attempt++) {
    if (attemptTimeoutMs(run) <= 0) {
      info(`the max-time budget of ${run.o.maxTimeS} s is spent`);
      return reportFailure(run);
    }
    run.answer = null;
    let step = OK;
    if (!run.jwt || monoMs() - run.mintedAt > REMINT_AFTER_MS) {
      run.jwt = null;
      step = await mint(run);
    }
    if (step === OK) step = await post(run);
    if (step === OK) {
      info(`HTTP ${run.answer.status} ${trimC(run.answer.text)}`);
      return 0;
    }
    if (step === FAIL) return reportFailure(run);
    const waitS = retryDelaySeconds(attempt, run.retryAfter);
    if (monoMs() + waitS * 1000 >= run.deadline) {
      info(`${run.why}; giving up (max-time ${run.o.maxTimeS} s)`);
      return reportFailure(run);
    }
    info(`${run.why}; retrying in ${waitS} s`);
    await sleep(waitS * 1000);
  }
}

// The OIDC request variables exist only with `permissions: id-token: write`.
function checkTokenEnv(env) {
  if (!env.tokenUrl || !env.tokenSecret) {
    throw new Failure(
      'OIDC token request variables are missing: does the job have permissions: id-token: write?');
  }
  if (env.tokenUrl.length > MAX_URL || !urlAllowed(env.tokenUrl)) {
    throw new Failure('ACTIONS_ID_TOKEN_REQUEST_URL must be an https:// URL');
  }
  if (!headerSafe(env.tokenSecret, MAX_REQUEST_TOKEN)) {
    throw new Failure('ACTIONS_ID_TOKEN_REQUEST_TOKEN is malformed');
  }
}

async function main() {
  const env = readEnv();
  if (env.tokenSecret) secrets.push(env.tokenSecret); // the runner masks it too
  const o = readOptions();
  const { url, from } = callbackUrl();
  const body = buildBody(o, env, Date.now());
  if (from === 'default') {
    info(`callback-url was not given (nor CRCR_CALLBACK_URL): reporting to the default, the ` +
      `upstream relay's ${shownUrl(url)}`);
  }
  if (o.dryRun) {
    info('dry-run: POST ' + shownUrl(url));
    out(1, scrubSecrets(body));
    return 0;
  }
  checkTokenEnv(env);
  info(`POST ${shownUrl(url)} (${o.status}, ${body.length} bytes)`);
  const run = { o, env, url, urlFrom: from, body: Buffer.from(body, 'latin1'), jwt: null,
    mintedAt: 0, retryAfter: -1, why: '', answer: null, unreachable: false,
    deadline: monoMs() + o.maxTimeS * 1000 };
  return sendWithRetries(run);
}

main().then(
  (code) => process.exit(code),
  (err) => {
    annotateError(err instanceof Failure ? err.message : 'internal error: ' + describe(err));
    process.exit(1);
  });
