// The benchmark peer: the smallest honest webhook receiver built on @octokit/webhooks 14.2.0.
//
// POST /github/webhook: reads the body, then webhooks.verifyAndReceive() checks the
// X-Hub-Signature-256 HMAC (timingSafeEqual), JSON.parse()s the body and emits the event to the
// handler below, which reads a few fields like a real app would. Answers 202 {"ok":true} on
// success, 400 on a missing header or a bad signature (as @octokit does), 404 elsewhere.
// Nothing is persisted: this is the peer crcr is compared with, not a relay.
//
// Environment: PEER_PORT (default 0 = any free port), PEER_SECRET (webhook secret, required).
// Prints "listening <port>" on stdout once it accepts connections. Loopback only.
import http from "node:http";
import { Webhooks } from "@octokit/webhooks";

const secret = process.env.PEER_SECRET;
if (!secret) {
  console.error("PEER_SECRET is required");
  process.exit(2);
}
const webhooks = new Webhooks({ secret });
let handled = 0;
webhooks.onAny(({ payload }) => {
  // What a relay would look at: the repository, the action and the PR number.
  if (payload && payload.repository && payload.repository.full_name && payload.action !== "") {
    handled++;
  }
});

function answer(res, status, body) {
  const data = JSON.stringify(body);
  res.writeHead(status, {
    "content-type": "application/json",
    "content-length": Buffer.byteLength(data),
  });
  res.end(data);
}

const server = http.createServer((req, res) => {
  if (req.method === "GET" && req.url === "/healthz") {
    return answer(res, 200, { ok: true, handled });
  }
  if (req.url !== "/github/webhook") return answer(res, 404, { detail: "Not found" });
  if (req.method !== "POST") return answer(res, 405, { detail: "Method not allowed" });
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", async () => {
    const id = req.headers["x-github-delivery"];
    const name = req.headers["x-github-event"];
    const signature = req.headers["x-hub-signature-256"];
    if (!id || !name || !signature) return answer(res, 400, { detail: "missing headers" });
    try {
      await webhooks.verifyAndReceive({
        id,
        name,
        payload: Buffer.concat(chunks).toString("utf8"),
        signature,
      });
      answer(res, 202, { ok: true });
    } catch (err) {
      const status = (err.errors && err.errors[0] && err.errors[0].status) || err.status || 500;
      answer(res, status, { detail: String(err.message || err) });
    }
  });
});

server.listen(Number(process.env.PEER_PORT || 0), "127.0.0.1", () => {
  console.log(`listening ${server.address().port}`);
});
process.on("SIGTERM", () => server.close(() => process.exit(0)));
