-- wrk script: callback pairs (in_progress, then completed) for distinct runs of one dispatch.
--
-- wrk cannot wait for one answer before sending a dependent request, so the stream is ordered in
-- blocks instead: B in_progress callbacks for runs k..k+B-1, then the B completed callbacks of the
-- same runs, then the next block. With B (CB_BLOCK, default 256) far above the connection count,
-- a run's in_progress has normally been answered long before its completed is sent. That holds
-- only while B / (requests per second) exceeds the slowest answer: a server whose latency tail
-- is longer lets a completed overtake its in_progress, which shows up as a non-200 answer
-- (400 "completed without prior in_progress") in the count printed at the end.
--
-- wrk's Lua is LuaJIT (Lua 5.1): no integer division operator, hence math.floor.
--
-- Environment (read by every wrk thread; use one thread, -t1, so the order is global):
--   CB_TOKEN   the OIDC token (Bearer), valid for the whole run
--   CB_IP      file: the in_progress body, with the text @@RUN@@ where the run id goes
--   CB_DONE    file: the completed body, same placeholder
--   CB_BASE    first run id (a run id is CB_BASE + k; use a fresh base per run)
--   CB_BLOCK   block size B
-- Prints the count of non-200 answers and the first three of them at the end.
-- wrk calls request() once before the run to check the request it builds (script_verify_request)
-- and never sends that one: the counter starts at -1 so that this call takes a spare in_progress
-- (run CB_BASE - 1) instead of the first run's, whose completed would otherwise arrive alone.
local counter = -1
local threads = {}
bad = 0 -- non-200 answers of this thread (global: read back in done())
bad_sample = "" -- the first few of them, status and body
local auth, ip_head, ip_tail, done_head, done_tail, base, block

local function split(path)
  local f = assert(io.open(assert(path, "template path unset"), "rb"))
  local text = f:read("*a")
  f:close()
  local at = assert(text:find("@@RUN@@", 1, true), "no @@RUN@@ in " .. path)
  return text:sub(1, at - 1), text:sub(at + 7)
end

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  auth = "Bearer " .. assert(os.getenv("CB_TOKEN"), "CB_TOKEN unset")
  ip_head, ip_tail = split(os.getenv("CB_IP"))
  done_head, done_tail = split(os.getenv("CB_DONE"))
  base = tonumber(os.getenv("CB_BASE") or "1000000")
  block = tonumber(os.getenv("CB_BLOCK") or "256")
end

function request()
  local i = counter
  counter = counter + 1
  local b = math.floor(i / (2 * block))
  local pos = i % (2 * block)
  local body
  if i < 0 then
    body = ip_head .. tostring(base - 1) .. ip_tail
  elseif pos < block then
    body = ip_head .. tostring(base + b * block + pos) .. ip_tail
  else
    body = done_head .. tostring(base + b * block + pos - block) .. done_tail
  end
  return wrk.format("POST", "/github/callback", {
    ["Content-Type"] = "application/json",
    ["Authorization"] = auth,
    ["User-Agent"] = "crcr-bench-callback",
  }, body)
end

function response(status, headers, body)
  if status ~= 200 then
    bad = bad + 1
    if bad <= 3 then
      bad_sample = bad_sample .. status .. " " .. string.sub(body or "", 1, 200) .. "\n"
    end
  end
end

function done(summary, latency, requests)
  for _, t in ipairs(threads) do
    io.write(string.format("callback non-200 answers: %d\n", t:get("bad")))
    local sample = t:get("bad_sample")
    if sample and #sample > 0 then
      io.write("first non-200 answers:\n" .. sample)
    end
  end
end
