-- wrk script: POST one signed GitHub webhook body, each request with its own X-GitHub-Delivery.
--
-- Environment (read by every wrk thread):
--   BENCH_BODY    file holding the exact request body (its bytes are sent unchanged)
--   BENCH_SIG     "sha256=<hex>": the HMAC-SHA256 of that body with the webhook secret
--   BENCH_EVENT   X-GitHub-Event (default pull_request)
--   BENCH_PREFIX  delivery id prefix, unique per run (default "bench")
--   BENCH_MAX     optional: a thread stops after this many answers (bounds a run by count;
--                 the wrk -d duration still bounds it by time)
--   BENCH_BODIES  optional, instead of BENCH_BODY/BENCH_SIG: a file of lines "<body file> <sig>";
--                 the requests take them in turn (each thread from its own starting line), e.g.
--                 the same webhook for 64 different pull requests
-- Delivery ids are "<prefix>-<thread>-<counter>": unique across threads and requests, so crcr
-- never answers a duplicate and every request takes the durable path.
-- (wrk also calls request() once before the run without sending it: one id is skipped.)
local counter = 0
local answers = 0
local body, sig, event, prefix, max_answers
local bodies, sigs, turn = nil, nil, 0
local next_thread = 0

function setup(thread)
  thread:set("tid", next_thread)
  next_thread = next_thread + 1
end

local function slurp(path)
  local f = assert(io.open(path, "rb"))
  local data = f:read("*a")
  f:close()
  return data
end

function init(args)
  local list = os.getenv("BENCH_BODIES")
  if list then
    bodies, sigs = {}, {}
    for line in io.lines(list) do
      local path, s = line:match("^(%S+)%s+(%S+)$")
      if path then
        bodies[#bodies + 1] = slurp(path)
        sigs[#sigs + 1] = s
      end
    end
    assert(#bodies > 0, "BENCH_BODIES lists no body")
    turn = tid or 0
  else
    body = slurp(assert(os.getenv("BENCH_BODY"), "BENCH_BODY unset"))
    sig = assert(os.getenv("BENCH_SIG"), "BENCH_SIG unset")
  end
  event = os.getenv("BENCH_EVENT") or "pull_request"
  prefix = (os.getenv("BENCH_PREFIX") or "bench") .. "-" .. tostring(tid or 0) .. "-"
end

function request()
  counter = counter + 1
  if bodies then
    turn = turn % #bodies + 1
    body, sig = bodies[turn], sigs[turn]
  end
  return wrk.format("POST", "/github/webhook", {
    ["Content-Type"] = "application/json",
    ["User-Agent"] = "GitHub-Hookshot/bench",
    ["X-GitHub-Event"] = event,
    ["X-GitHub-Delivery"] = prefix .. counter,
    ["X-GitHub-Hook-ID"] = "1",
    ["X-GitHub-Hook-Installation-Target-Type"] = "integration",
    ["X-GitHub-Hook-Installation-Target-ID"] = "1",
    ["X-Hub-Signature-256"] = sig,
  }, body)
end

-- Only defined when a count bound is asked for: a response() hook costs wrk some speed.
if os.getenv("BENCH_MAX") then
  max_answers = tonumber(os.getenv("BENCH_MAX"))
  function response(status, headers, resp_body)
    answers = answers + 1
    if answers >= max_answers then
      wrk.thread:stop()
    end
  end
end
