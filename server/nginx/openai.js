// The OpenAI-compatible embeddings route of the front door (njs): POST /v1/embeddings,
// GET /v1/models and /v1/models/{id}. A request is checked here, cut into chunks of the
// model's request rows (its preferred batch, else max_batch_size), sent to the
// text-embedding front model's KServe route as concurrent subrequests (so priorities,
// degradation and versions all apply), and the answers are put back together in
// OpenAI's shape. The models come from
// `openai_models`, a JSON file preloaded by nginx (server/openai_models.py writes it from
// the repository). Pure functions are exported for tests/unit/test_openai_njs.py.

// The text-embedding family's input tensor (core/families/text_embedding.py; a unit test
// keeps the two in step), and how a front model's message names one of its rows:
// core.messages.row_ref, "TEXT[3]" (the unit test feeds this the producer's real messages).
const TEXT_INPUT = "TEXT";
const ROW_REF = new RegExp(TEXT_INPUT + "\\[(\\d+)\\]", "g");
const MAX_INPUTS = 2048;
const MAX_USER_CHARS = 256;
const PRIORITIES = {"1": 1, "high": 1, "2": 2, "standard": 2};
// The extension field `truncate`: what a text over the model's length gets (the front
// model's request parameter of the same name; its values are the request contract's
// OVERLENGTH_POLICIES, client/contract.py, which a unit test keeps in step).
const TRUNCATE_CHOICES = ["reject", "truncate", "chunk"];
// The per-text counts the front returns beside EMBEDDING, summed into `usage`.
const COUNTS = {TOKENS: "prompt_tokens", TRUNCATED_TOKENS: "truncated_tokens",
                WINDOWS: "windows"};
const LANGCHAIN_HINT = "this server takes text only and does not decode another " +
    "tokenizer's ids; LangChain users: set check_embedding_ctx_length=False on " +
    "OpenAIEmbeddings so it sends the texts";

function errorBody(message, type, param, code) {
    return JSON.stringify({error: {message: message, type: type,
                                   param: param === undefined ? null : param,
                                   code: code === undefined ? null : code}});
}

// An OpenAI-shaped error, as {status, body}.
function failure(status, message, param, code) {
    const types = {400: "invalid_request_error", 401: "invalid_request_error",
                   404: "invalid_request_error", 413: "invalid_request_error",
                   429: "rate_limit_error", 503: "server_error"};
    return {status: status, body: errorBody(message, types[status] || "server_error",
                                            param, code)};
}

function modelTable(table) {
    const byName = {};
    table.models.forEach((model) => {
        model.names.forEach((name) => {
            byName[name] = model;
        });
    });
    return byName;
}

function isTokenIds(item) {
    return typeof item === "number" ||
        (Array.isArray(item) && item.length > 0 && typeof item[0] === "number");
}

// The request's extension fields `truncate` and `chunk_overlap` as the front model's
// request parameters, or {error: failure(...)}.
function textParameters(body) {
    const parameters = {};
    if (body.truncate !== undefined && body.truncate !== null) {
        if (typeof body.truncate !== "boolean" && TRUNCATE_CHOICES.indexOf(body.truncate) < 0) {
            return {error: failure(400, "truncate must be true, false, or one of " +
                                        TRUNCATE_CHOICES.join(", ") + "; got " +
                                        JSON.stringify(body.truncate), "truncate")};
        }
        parameters.truncate = body.truncate;
    }
    if (body.chunk_overlap !== undefined && body.chunk_overlap !== null) {
        if (!Number.isInteger(body.chunk_overlap) || body.chunk_overlap < 0) {
            return {error: failure(400, "chunk_overlap must be an integer >= 0; got " +
                                        JSON.stringify(body.chunk_overlap), "chunk_overlap")};
        }
        parameters.chunk_overlap = body.chunk_overlap;
    }
    return {parameters: parameters};
}

// The checked request, {model, texts, format, priority, user, parameters}, or
// {error: failure(...)}.
function parseRequest(text, table, priorityHeader) {
    let body;
    try {
        body = JSON.parse(text);
    } catch (e) {
        return {error: failure(400, "the request body is not valid JSON: " + e.message)};
    }
    if (body === null || typeof body !== "object" || Array.isArray(body)) {
        return {error: failure(400, "the request body must be a JSON object")};
    }
    if (body.model === undefined || body.model === null || body.model === "") {
        return {error: failure(400, "you must provide a model parameter", "model")};
    }
    if (typeof body.model !== "string") {
        return {error: failure(400, "model must be a string", "model")};
    }
    const model = modelTable(table)[body.model];
    if (model === undefined) {
        const known = table.models.map((m) => m.id).join(", ");
        return {error: failure(404, "The model '" + body.model + "' does not exist; served " +
                                    "embedding models: " + known, "model", "model_not_found")};
    }
    let input = body.input;
    if (input === undefined || input === null) {
        return {error: failure(400, "you must provide an input parameter", "input")};
    }
    if (typeof input === "string" || isTokenIds(input)) {
        input = [input];
    }
    if (!Array.isArray(input) || input.length === 0) {
        return {error: failure(400, "input must be a non-empty string or a non-empty array " +
                                    "of strings", "input")};
    }
    if (input.length > MAX_INPUTS) {
        return {error: failure(400, "input has " + input.length + " items, over the limit " +
                                    "of " + MAX_INPUTS + " per request", "input")};
    }
    for (let i = 0; i < input.length; i++) {
        if (isTokenIds(input[i])) {
            return {error: failure(400, "input[" + i + "] is an array of token ids; " +
                                        LANGCHAIN_HINT, "input")};
        }
        if (typeof input[i] !== "string") {
            return {error: failure(400, "input[" + i + "] is " + typeOf(input[i]) +
                                        ", not a string", "input")};
        }
        if (input[i].length === 0) {
            return {error: failure(400, "input[" + i + "] is an empty string; every input " +
                                        "must have text", "input")};
        }
    }
    const format = body.encoding_format === undefined || body.encoding_format === null ?
        "float" : body.encoding_format;
    if (format !== "float" && format !== "base64") {
        return {error: failure(400, "encoding_format must be \"float\" or \"base64\", got " +
                                    JSON.stringify(format), "encoding_format")};
    }
    if (body.dimensions !== undefined && body.dimensions !== null &&
            body.dimensions !== model.dimensions) {
        return {error: failure(400, "dimensions must be " + model.dimensions + " for " +
                                    body.model + " (its embeddings are not trained to be " +
                                    "truncated), got " + JSON.stringify(body.dimensions),
                               "dimensions")};
    }
    if (body.user !== undefined && body.user !== null && typeof body.user !== "string") {
        return {error: failure(400, "user must be a string", "user")};
    }
    let priority = null;
    if (priorityHeader) {
        priority = PRIORITIES[String(priorityHeader).trim().toLowerCase()];
        if (priority === undefined) {
            return {error: failure(400, "x-priority must be 1 or \"high\", 2 or \"standard\"; got " +
                                        JSON.stringify(priorityHeader), "x-priority")};
        }
    }
    const extension = textParameters(body);
    if (extension.error) {
        return extension;
    }
    return {model: model, texts: input, format: format, priority: priority,
            user: (body.user || "").slice(0, MAX_USER_CHARS), parameters: extension.parameters};
}

function typeOf(value) {
    if (value === null) {
        return "null";
    }
    if (Array.isArray(value)) {
        return "an array";
    }
    return (/^[aeiou]/.test(typeof value) ? "an " : "a ") + typeof value;
}

// [start, end) of each chunk of at most `size` rows.
function chunks(n, size) {
    const out = [];
    for (let start = 0; start < n; start += size) {
        out.push([start, Math.min(start + size, n)]);
    }
    return out;
}

// Run `tasks` (functions returning promises) in waves of at most `limit`, as a front model
// has instances: a long input must not fill the queue past its timeout. After a wave with
// a failed answer (status other than 200) no further wave starts; those left are undefined.
async function inWaves(tasks, limit) {
    const results = new Array(tasks.length);
    const size = Math.max(1, limit);
    for (let start = 0; start < tasks.length; start += size) {
        const wave = await Promise.all(tasks.slice(start, start + size).map((t) => t()));
        let failed = false;
        for (let i = 0; i < wave.length; i++) {
            results[start + i] = wave[i];
            failed = failed || wave[i].status !== 200;
        }
        if (failed) {
            break;
        }
    }
    return results;
}

// The KServe v2 request of one chunk: the texts, binary EMBEDDING and the JSON counts
// back; the priority and the request's text parameters (truncate, chunk_overlap).
function kserveBody(texts, priority, parameters) {
    const request = {
        inputs: [{name: TEXT_INPUT, datatype: "BYTES", shape: [texts.length, 1], data: texts}],
        outputs: [{name: "EMBEDDING", parameters: {binary_data: true}}].concat(
            Object.keys(COUNTS).map((name) => ({name: name, parameters: {binary_data: false}}))),
    };
    const given = Object.assign({}, parameters || {});
    if (priority !== null) {
        given.priority = priority;
    }
    if (Object.keys(given).length > 0) {
        request.parameters = given;
    }
    return JSON.stringify(request);
}

// {embeddings: [row, ...], counts} of one chunk's answer, each row a float array or
// base64, and the usage counts (prompt_tokens, truncated_tokens, windows) of its texts.
function decodeAnswer(buffer, headerLength, rows, dimensions, format) {
    const header = JSON.parse(buffer.slice(0, headerLength).toString());
    const counts = {prompt_tokens: 0, truncated_tokens: 0, windows: 0};
    header.outputs.forEach((output) => {
        const key = COUNTS[output.name];
        if (key !== undefined) {
            output.data.forEach((count) => {
                counts[key] += count;
            });
        }
    });
    const rowBytes = dimensions * 4;
    const embeddings = [];
    for (let i = 0; i < rows; i++) {
        const start = headerLength + i * rowBytes;
        if (format === "base64") {
            embeddings.push(buffer.slice(start, start + rowBytes).toString("base64"));
        } else {
            const view = new DataView(buffer.buffer, buffer.byteOffset + start, rowBytes);
            const values = new Array(dimensions);
            for (let j = 0; j < dimensions; j++) {
                values[j] = view.getFloat32(j * 4, true);
            }
            embeddings.push(values);
        }
    }
    return {embeddings: embeddings, counts: counts};
}

// Triton's error for one chunk, in OpenAI's shape; row indexes made the request's own.
function upstreamFailure(status, text, offset) {
    let message = text;
    try {
        message = JSON.parse(text).error || text;
    } catch (e) {
        // not JSON: keep the text
    }
    message = message.replace(ROW_REF, (m, i) => "input[" + (offset + Number(i)) + "]");
    if (status === 400) {
        return failure(400, message, "input");
    }
    if (status === 429 || status === 503 || status === 502 || status === 504) {
        return failure(503, message || "the inference server is unavailable; retry later");
    }
    return failure(status >= 500 ? 500 : status, message);
}

// The preloaded table as plain objects (njs's preloaded arrays lack Array's methods).
function loadedTable() {
    return JSON.parse(JSON.stringify(openai_models));
}

function respond(r, result) {
    r.headersOut["Content-Type"] = "application/json";
    if (result.status === 503) {
        r.headersOut["Retry-After"] = "1";
    }
    r.return(result.status, result.body);
}

async function embeddings(r) {
    try {
        await serveEmbeddings(r);
    } catch (e) {
        r.error("openai.js: " + e.stack);
        respond(r, failure(500, "internal error of the front door's OpenAI route: " + e.message));
    }
}

async function serveEmbeddings(r) {
    if (r.method !== "POST") {
        r.headersOut["Allow"] = "POST";
        respond(r, {status: 405, body: errorBody("use POST for /v1/embeddings",
                                                 "invalid_request_error", null,
                                                 "method_not_allowed")});
        return;
    }
    const request = parseRequest(r.requestText || "", loadedTable(),
                                 r.headersIn["x-priority"]);
    if (request.error) {
        respond(r, request.error);
        return;
    }
    r.variables.openai_user = request.user;
    const model = request.model;
    const truncate = request.parameters.truncate;
    const chunked = truncate === "chunk" ||
        ((truncate === undefined) && model.chunks_by_default === true);
    const parts = chunks(request.texts.length,
                         chunked ? model.chunk_rows || 1 : model.request_rows);
    // Priority 1 goes to the front's interactive lane where it has one (core/families/lanes.py).
    const target = request.priority === 1 && model.lane ? model.lane : model.front;
    const replies = await inWaves(parts.map((part) => () => r.subrequest(
        "/_triton_plain/v2/models/" + target + "/infer",
        {method: "POST", body: kserveBody(request.texts.slice(part[0], part[1]),
                                          request.priority, request.parameters)})),
        model.in_flight);
    const failed = replies.findIndex((x) => x !== undefined && x.status !== 200);
    if (failed !== -1) {
        respond(r, upstreamFailure(replies[failed].status, replies[failed].responseText || "",
                                   parts[failed][0]));
        return;
    }
    const data = [];
    const usage = {prompt_tokens: 0, total_tokens: 0, truncated_tokens: 0, windows: 0};
    for (let p = 0; p < parts.length; p++) {
        const reply = replies[p];
        const headerLength = Number(reply.headersOut["Inference-Header-Content-Length"]);
        const answer = decodeAnswer(reply.responseBuffer, headerLength,
                                    parts[p][1] - parts[p][0], model.dimensions,
                                    request.format);
        Object.keys(answer.counts).forEach((key) => {
            usage[key] += answer.counts[key];
        });
        for (let i = 0; i < answer.embeddings.length; i++) {
            data.push({object: "embedding", index: parts[p][0] + i,
                       embedding: answer.embeddings[i]});
        }
    }
    respond(r, {status: 200, body: JSON.stringify({
        object: "list", data: data, model: model.id,
        usage: Object.assign(usage, {total_tokens: usage.prompt_tokens})})});
}

function modelObject(model, created) {
    return {id: model.id, object: "model", created: created, owned_by: "tmr"};
}

function models(r) {
    const table = loadedTable();
    const id = r.uri.replace(/^\/v1\/models\/?/, "");
    if (id === "") {
        respond(r, {status: 200, body: JSON.stringify({
            object: "list", data: table.models.map((m) => modelObject(m, table.created))})});
        return;
    }
    const model = modelTable(table)[decodeURIComponent(id)];
    respond(r, model === undefined ?
        failure(404, "The model '" + decodeURIComponent(id) + "' does not exist", "model",
                "model_not_found") :
        {status: 200, body: JSON.stringify(modelObject(model, table.created))});
}

export default {embeddings, models, parseRequest, textParameters, chunks, kserveBody,
                decodeAnswer,
                upstreamFailure, failure, errorBody, TEXT_INPUT, TRUNCATE_CHOICES};
