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

// A request with the standard `parameters.priority` 1 goes to its model's interactive lane
// (core/families/lanes.py), unless it names a version or a lane; a model without a lane
// answers "unknown model" for it, and the request goes to the model as sent.
const LANE_SUFFIX = "_interactive";
const INTERACTIVE_PRIORITY = 1;
const MODEL_INFER = /^\/v2\/models\/([^/]+)\/infer$/;

function requestHeaderJson(r) {
    const body = r.requestBuffer;
    if (!body) {
        return null;
    }
    const binary = r.headersIn["Inference-Header-Content-Length"];
    const length = binary ? parseInt(binary, 10) : body.length;
    try {
        return JSON.parse(body.slice(0, length).toString());
    } catch (e) {
        return null;
    }
}

function laneUri(r) {
    const match = r.uri.match(MODEL_INFER);
    if (!match || match[1].endsWith(LANE_SUFFIX)) {
        return null;
    }
    const header = requestHeaderJson(r);
    const priority = header && header.parameters ? header.parameters.priority : undefined;
    return priority === INTERACTIVE_PRIORITY
        ? "/v2/models/" + match[1] + LANE_SUFFIX + "/infer" : null;
}

// A replica that was sent SIGTERM outside a planned stop refuses new requests ("Server is
// stopping", then, its models unloaded, "has no available versions") until it exits:
// the request is sent again, and nginx's round robin picks the next replica, at most
// REPLICA_TRIES times in all. A planned stop takes the replica out of the upstream
// first (server/fleet.py), and a dead one is nginx's own proxy_next_upstream.
const STOPPING = ["Server is stopping", "has no available versions"];
const REPLICA_TRIES = 3;

function stopping(reply) {
    const text = reply.status === 503 || reply.status === 400 || reply.status === 404
        ? reply.responseText || "" : "";
    return STOPPING.some((marker) => text.indexOf(marker) !== -1);
}

async function send(r, uri, options) {
    let reply = await r.subrequest(uri, options);
    for (let tries = 1; tries < REPLICA_TRIES && stopping(reply); tries++) {
        reply = await r.subrequest(uri, options);
    }
    return reply;
}

function queueFull(reply) {
    return reply.status === 503
        && (reply.responseText || "").indexOf("Exceeds maximum queue size") !== -1;
}

function noSuchLane(reply) {
    return (reply.status === 400 || reply.status === 404)
        && (reply.responseText || "").indexOf("unknown model") !== -1;
}

async function infer(r) {
    const options = {method: r.method, args: r.variables.args || ""};
    const lane = laneUri(r);
    let reply = lane ? await send(r, "/_triton" + lane, options) : null;
    // A lane whose short queue is full: the request goes to the front itself, where
    // priority 1 waits ahead of bulk in Triton's queue instead of being refused.
    const laned = reply !== null && !noSuchLane(reply) && !queueFull(reply);
    if (!laned) {
        reply = await send(r, "/_triton" + r.uri, options);
    }
    for (const name in reply.headersOut) {
        if (HOP_BY_HOP.indexOf(name.toLowerCase()) === -1) {
            r.headersOut[name] = reply.headersOut[name];
        }
    }
    r.headersOut["X-Tmr-Lane"] = laned ? "interactive" : "shared";
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
