// CORS, as llama-server does it: a request's Origin is echoed back in
// Access-Control-Allow-Origin with credentials allowed, and a preflight (OPTIONS with
// Access-Control-Request-Method) is answered here with an empty 200, before auth (browsers
// send no key on a preflight). Any other OPTIONS goes on to the routes, and so to the 404.
// --cors-origins narrows the echo to a list; an Origin off the list gets no CORS headers,
// so the browser keeps the response from the page. A request without Origin (not a
// browser's cross-origin call) gets none either.
import type { RequestHandler } from 'express';

/** The methods this server routes (DELETE: /v1/responses/{id}). */
const ALLOWED_METHODS = 'GET, POST, DELETE';

/** `origins` undefined: any origin, as llama-server's default "*". */
export function cors(origins?: readonly string[]): RequestHandler {
  const allowed = origins && new Set(origins);
  return (req, res, next) => {
    res.vary('Origin');
    const origin = req.headers.origin;
    if (origin && (!allowed || allowed.has(origin))) {
      res.setHeader('Access-Control-Allow-Origin', origin);
      res.setHeader('Access-Control-Allow-Credentials', 'true');
      res.setHeader('Access-Control-Allow-Methods', ALLOWED_METHODS);
      // Echoing the requested headers rather than llama-server's "*": a wildcard never
      // covers Authorization, nor anything when credentials are sent.
      res.setHeader('Access-Control-Allow-Headers', req.headers['access-control-request-headers'] ?? '*');
    }
    if (req.method === 'OPTIONS' && req.headers['access-control-request-method']) {
      res.status(200).end();
      return;
    }
    next();
  };
}
