// A real HTTP server on loopback for the client's tests (not a test file itself).
import http from "node:http";

/**
 * Runs `fn(endpoint, requests)` against a loopback server whose `handler(req, res, body, n)` answers
 * the n-th request (from 1); `requests` records each one's method, path, headers and body.
 */
export async function withServer(handler, fn) {
  const requests = [];
  const server = http.createServer((req, res) => {
    let body = "";
    req.on("data", (c) => (body += c));
    req.on("end", () => {
      requests.push({ method: req.method, url: req.url, headers: req.headers, body });
      handler(req, res, body, requests.length);
    });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  try {
    await fn(`http://127.0.0.1:${server.address().port}/chat`, requests);
  } finally {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
}
