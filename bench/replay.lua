-- wrk script: replays one recorded request (the fan-out sections' calibration of the fake GitHub:
-- how many repository_dispatch requests of the relay's own size one fake process answers per
-- second, with its injected latency, at a given number of connections).
--
-- Environment (read by every wrk thread):
--   REPLAY_PATH   request path, e.g. /repos/o/r/dispatches
--   REPLAY_AUTH   Authorization header value (the installation token the relay used)
--   REPLAY_BODY   file holding the exact request body
local body, path, auth

function init(args)
  local f = assert(io.open(assert(os.getenv("REPLAY_BODY"), "REPLAY_BODY unset"), "rb"))
  body = f:read("*a")
  f:close()
  path = assert(os.getenv("REPLAY_PATH"), "REPLAY_PATH unset")
  auth = assert(os.getenv("REPLAY_AUTH"), "REPLAY_AUTH unset")
end

function request()
  return wrk.format("POST", path, {
    ["Content-Type"] = "application/json",
    ["Accept"] = "application/vnd.github+json",
    ["Authorization"] = auth,
    ["User-Agent"] = "crcr-bench-replay",
  }, body)
end
