// The front door's inference handler (njs): Triton 2.51 answers a request body it cannot
// parse as JSON with HTTP 500. That is the client's fault, so it becomes a 400 with
// Triton's own message; every other answer, a genuine 500 included, passes unchanged,
// a 503 with Retry-After added.

const CLIENT_GARBAGE = ["failed to parse the request JSON buffer", "Unable to parse"];
const RETRY_AFTER_S = "1";
const HOP_BY_HOP = ["connection", "content-length", "keep-alive", "transfer-encoding"];

function isClientGarbage(text) {
    try {
        const message = JSON.parse(text).error || "";
        return CLIENT_GARBAGE.some((marker) => message.startsWith(marker));
    } catch (e) {
        return false;
    }
}

async function infer(r) {
    const reply = await r.subrequest("/_triton" + r.uri,
                                     {method: r.method, args: r.variables.args || ""});
    for (const name in reply.headersOut) {
        if (HOP_BY_HOP.indexOf(name.toLowerCase()) === -1) {
            r.headersOut[name] = reply.headersOut[name];
        }
    }
    // Triton's 503 (a full priority queue, a queue timeout, a degraded refusal): the
    // request may be sent again, and Retry-After says when.
    if (reply.status === 503) {
        r.headersOut["Retry-After"] = RETRY_AFTER_S;
    }
    // Only a 500 body is read as text: a success may be a binary tensor payload.
    const garbage = reply.status === 500 && isClientGarbage(reply.responseText);
    r.return(garbage ? 400 : reply.status, reply.responseBuffer);
}

export default {infer};
