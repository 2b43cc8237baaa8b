// The OpenAI-style routes of the front door (njs): POST /v1/embeddings, /v1/tokenize,
// /v1/similarity and /v1/classify, GET /v1/models and /v1/models/{id} (docs/openai.md).
// A request is checked here, cut into chunks of the model's request rows (its preferred
// batch, else max_batch_size), sent to the front model's KServe route as concurrent
// subrequests (so priorities, degradation and versions all apply), and the answers are
// put back together in OpenAI's shape. The models come from `openai_models`, a JSON file
// preloaded by nginx (server/openai_models.py writes it from the repository). The rerank
// routes (rerank.js) are built on the helpers exported here. Pure functions are exported
// for tests/unit/test_openai_njs.py and test_rerank_njs.py.

// The families' input tensors (core/families; client/contract.py names them, and a unit
// test keeps the two in step), and how a front model's message names one of its rows:
// core.messages.row_ref, "TEXT[3]" (the unit tests feed this the producer's real messages).
const TEXT_INPUT = "TEXT";
const IMAGE_INPUT = "IMAGE";  // the image-classification family's
const QUERY_INPUT = "QUERY";  // the text-ranking family's: a pair's query ...
const DOCUMENT_INPUT = "DOCUMENT";  // ... and its document
const ROW_REF = new RegExp("(" + [TEXT_INPUT, IMAGE_INPUT, QUERY_INPUT, DOCUMENT_INPUT]
                           .join("|") + ")\\[(\\d+)\\]", "g");
// The model table's lists (server/openai_models.py), each one family's models: what the
// 404 calls them, what a model of the list is, and the route that serves it.
const FAMILIES = {
    models: {served: "embedding", kind: "a text-embedding model",
             route: "POST /v1/embeddings (or /v1/tokenize, /v1/similarity)"},
    classifiers: {served: "image-classification", kind: "an image-classification model",
                  route: "POST /v1/classify"},
    rerankers: {served: "reranking", kind: "a reranker (cross-encoder)",
                route: "POST /v1/rerank or /v2/rerank"},
};
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
// The image front's outputs /v1/classify reads (client/contract.py's names).
const CLASS_OUTPUTS = ["CLASS_IDS", "LABELS", "PROBABILITIES"];
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

function modelTable(models) {
    const byName = {};
    models.forEach((model) => {
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

// The request's extension fields as the front model's request parameters, or
// {error: failure(...)}: `truncate` and `chunk_overlap`, and with `model` given (a text
// model's row of the table) `prompt_name` (one of its prompts) and `dimensions` (one of
// its sizes; its own size is sent as nothing).
function textParameters(body, model) {
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
    if (model === undefined) {
        return {parameters: parameters};
    }
    if (body.prompt_name !== undefined && body.prompt_name !== null) {
        const prompts = model.prompts || [];
        if (typeof body.prompt_name !== "string" || prompts.indexOf(body.prompt_name) < 0) {
            return {error: failure(400, "prompt_name names no prompt of " + model.id + ": got " +
                                        JSON.stringify(body.prompt_name) + "; " +
                                        (prompts.length ? "its prompts: " + prompts.join(", ") :
                                         "it has no prompts"), "prompt_name")};
        }
        parameters.prompt_name = body.prompt_name;
    }
    if (body.dimensions !== undefined && body.dimensions !== null) {
        const sizes = model.sizes || [model.dimensions];
        if (!Number.isInteger(body.dimensions) || sizes.indexOf(body.dimensions) < 0) {
            return {error: failure(400, "dimensions must be one of " + model.id + "'s sizes: " +
                                        sizes.join(", ") + (sizes.length > 1 ? "" :
                                        " (its embeddings are not trained to be cut: it " +
                                        "declares no Matryoshka sizes)") + "; got " +
                                        JSON.stringify(body.dimensions), "dimensions")};
        }
        if (body.dimensions !== model.dimensions) {
            parameters.dimensions = body.dimensions;
        }
    }
    return {parameters: parameters};
}

// The 404 of a name that is no model of the table's list `family`: an unknown name, or
// another family's model with the route that serves it.
function notServed(name, table, family) {
    const known = (table[family] || []).map((m) => m.id).join(", ") || "none";
    const served = "served " + FAMILIES[family].served + " models: " + known;
    const other = Object.keys(FAMILIES).filter((key) => key !== family &&
                                               modelTable(table[key] || [])[name]);
    const message = other.length ?
        "The model '" + name + "' is " + FAMILIES[other[0]].kind + ", not served by this " +
        "route: use " + FAMILIES[other[0]].route + "; " + served :
        "The model '" + name + "' does not exist; " + served;
    return {error: failure(404, message, "model", "model_not_found")};
}

// The body as a JSON object, the model it names (from the table's list `family`: models,
// classifiers or rerankers) and the priority header, or {error: failure(...)}.
function parseCommon(text, table, family, priorityHeader) {
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
    const model = modelTable(table[family] || [])[body.model];
    if (model === undefined) {
        return notServed(body.model, table, family);
    }
    let priority = null;
    if (priorityHeader) {
        priority = PRIORITIES[String(priorityHeader).trim().toLowerCase()];
        if (priority === undefined) {
            return {error: failure(400, "x-priority must be 1 or \"high\", 2 or \"standard\"; got " +
                                        JSON.stringify(priorityHeader), "x-priority")};
        }
    }
    return {body: body, model: model, priority: priority};
}

// `input` as a non-empty list of non-empty strings (`param` names it in errors), or
// {error: failure(...)}; `most` items at most.
function parseTexts(input, param, most) {
    if (input === undefined || input === null) {
        return {error: failure(400, "you must provide an " + param + " parameter", param)};
    }
    if (typeof input === "string" || isTokenIds(input)) {
        input = [input];
    }
    if (!Array.isArray(input) || input.length === 0) {
        return {error: failure(400, param + " must be a non-empty string or a non-empty " +
                                    "array of strings", param)};
    }
    if (input.length > most) {
        return {error: failure(400, param + " has " + input.length + " items, over the " +
                                    "limit of " + most + " per request", param)};
    }
    for (let i = 0; i < input.length; i++) {
        if (isTokenIds(input[i])) {
            return {error: failure(400, param + "[" + i + "] is an array of token ids; " +
                                        LANGCHAIN_HINT, param)};
        }
        if (typeof input[i] !== "string") {
            return {error: failure(400, param + "[" + i + "] is " + typeOf(input[i]) +
                                        ", not a string", param)};
        }
        if (input[i].length === 0) {
            return {error: failure(400, param + "[" + i + "] is an empty string; every " +
                                        "input must have text", param)};
        }
    }
    return {texts: input};
}

// The checked request, {model, texts, format, priority, user, parameters}, or
// {error: failure(...)}.
function parseRequest(text, table, priorityHeader) {
    const common = parseCommon(text, table, "models", priorityHeader);
    if (common.error) {
        return common;
    }
    const body = common.body;
    const input = parseTexts(body.input, "input", MAX_INPUTS);
    if (input.error) {
        return input;
    }
    const format = body.encoding_format === undefined || body.encoding_format === null ?
        "float" : body.encoding_format;
    if (format !== "float" && format !== "base64") {
        return {error: failure(400, "encoding_format must be \"float\" or \"base64\", got " +
                                    JSON.stringify(format), "encoding_format")};
    }
    if (body.user !== undefined && body.user !== null && typeof body.user !== "string") {
        return {error: failure(400, "user must be a string", "user")};
    }
    const extension = textParameters(body, common.model);
    if (extension.error) {
        return extension;
    }
    return {model: common.model, texts: input.texts, format: format, priority: common.priority,
            user: (body.user || "").slice(0, MAX_USER_CHARS), parameters: extension.parameters};
}

// POST /v1/tokenize: {model, input, prompt_name?, chunk_overlap?} checked as the
// embeddings route checks them; the front counts (`count_only`), no encoder runs.
function parseTokenize(text, table, priorityHeader) {
    const common = parseCommon(text, table, "models", priorityHeader);
    if (common.error) {
        return common;
    }
    const input = parseTexts(common.body.input, "input", MAX_INPUTS);
    if (input.error) {
        return input;
    }
    if (common.body.dimensions !== undefined) {
        return {error: failure(400, "dimensions has no meaning when counting tokens",
                               "dimensions")};
    }
    const extension = textParameters(common.body, common.model);
    if (extension.error) {
        return extension;
    }
    extension.parameters.count_only = true;
    return {model: common.model, texts: input.texts, priority: common.priority,
            parameters: extension.parameters};
}

// POST /v1/similarity, TEI's body: {model, inputs: {source_sentence, sentences},
// prompt_name?, dimensions?, truncate?}: one request of the source and the sentences, so
// at most the model's max_batch_size - 1 sentences.
function parseSimilarity(text, table, priorityHeader) {
    const common = parseCommon(text, table, "models", priorityHeader);
    if (common.error) {
        return common;
    }
    const inputs = common.body.inputs;
    if (inputs === null || typeof inputs !== "object" || Array.isArray(inputs)) {
        return {error: failure(400, "inputs must be an object: {\"source_sentence\": " +
                                    "\"...\", \"sentences\": [\"...\"]}", "inputs")};
    }
    if (typeof inputs.source_sentence !== "string" || inputs.source_sentence.length === 0) {
        return {error: failure(400, "inputs.source_sentence must be a non-empty string",
                               "inputs.source_sentence")};
    }
    const most = Math.max(1, (common.model.max_batch || 2) - 1);
    const sentences = parseTexts(inputs.sentences, "inputs.sentences", most);
    if (sentences.error) {
        return sentences;
    }
    const extension = textParameters(common.body, common.model);
    if (extension.error) {
        return extension;
    }
    return {model: common.model, texts: [inputs.source_sentence].concat(sentences.texts),
            priority: common.priority, parameters: extension.parameters};
}

const TEXT_ONLY = ["prompt_name", "dimensions", "truncate", "chunk_overlap", "encoding_format"];

// POST /v1/classify: {model, input: base64 or data URL string(s), top_k?} for an image
// model; the image front decodes and checks each image.
function parseClassify(text, table, priorityHeader) {
    const common = parseCommon(text, table, "classifiers", priorityHeader);
    if (common.error) {
        return common;
    }
    const input = parseTexts(common.body.input, "input", MAX_INPUTS);
    if (input.error) {
        return input;
    }
    // A text model's fields mean nothing for an image: refused, never silently dropped.
    const textOnly = TEXT_ONLY.filter((key) => common.body[key] !== undefined
                                                && common.body[key] !== null);
    if (textOnly.length) {
        return {error: failure(400, textOnly[0] + " applies to text-embedding models; " +
                                    common.model.id + " classifies images", textOnly[0])};
    }
    const parameters = {};
    const topK = common.body.top_k;
    if (topK !== undefined && topK !== null) {
        if (!Number.isInteger(topK) || topK < 1) {
            return {error: failure(400, "top_k must be an integer >= 1; got " +
                                        JSON.stringify(topK), "top_k")};
        }
        parameters.top_k = topK;
    }
    return {model: common.model, texts: input.texts, priority: common.priority,
            parameters: parameters};
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

// The KServe v2 request of one chunk: `inputs` maps each BYTES input to its rows (one
// string a row, every input as many rows), the `outputs` as [name, binary] pairs (by
// default binary EMBEDDING and the JSON counts); the priority and the request's
// parameters (truncate, chunk_overlap, ...).
function kserveBody(inputs, priority, parameters, outputs) {
    const wanted = outputs || [["EMBEDDING", true]].concat(
        Object.keys(COUNTS).map((name) => [name, false]));
    const request = {
        inputs: Object.keys(inputs).map((name) => ({
            name: name, datatype: "BYTES", shape: [inputs[name].length, 1],
            data: inputs[name]})),
        outputs: wanted.map((o) => ({name: o[0], parameters: {binary_data: o[1]}})),
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

// Each output of a JSON answer's header, by name: its data.
function outputsOf(header) {
    const found = {};
    header.outputs.forEach((output) => {
        found[output.name] = output.data;
    });
    return found;
}

// What `policy` does with a text the front counted: client/contract.py policy_outcome.
function policyOutcome(policy, truncated, windows) {
    if (truncated <= 0) {
        return "fits";
    }
    if (policy === "truncate") {
        return "truncated";
    }
    return policy === "chunk" && windows > 0 ? "chunked" : "refused";
}

// /v1/tokenize's rows of one chunk's JSON answer, numbered from `offset`.
function countRows(answer, offset, maxTokens) {
    const out = outputsOf(answer);
    return out.TOKENS.map((tokens, i) => {
        const truncated = out.TRUNCATED_TOKENS[i];
        const windows = out.WINDOWS[i];
        const policies = {};
        TRUNCATE_CHOICES.forEach((p) => {
            policies[p] = policyOutcome(p, truncated, windows);
        });
        return {object: "token_count", index: offset + i, tokens: tokens,
                max_tokens: maxTokens, truncated_tokens: truncated, windows: windows,
                policies: policies};
    });
}

// /v1/classify's rows of one chunk's JSON answer, numbered from `offset`: the best class,
// then every class asked for (top_k), best first.
function classRows(answer, offset) {
    const out = outputsOf(answer);
    const width = answer.outputs.filter((o) => o.name === "LABELS")[0].shape[1];
    const rows = [];
    for (let i = 0; i * width < out.LABELS.length; i++) {
        const classes = [];
        for (let j = i * width; j < (i + 1) * width; j++) {
            classes.push({class_id: out.CLASS_IDS[j], label: out.LABELS[j],
                          probability: out.PROBABILITIES[j]});
        }
        rows.push({object: "classification", index: offset + i, label: classes[0].label,
                   class_id: classes[0].class_id, probability: classes[0].probability,
                   top_k: classes});
    }
    return rows;
}

// The cosine of each row after the first with the first.
function cosines(rows) {
    const norm = (v) => Math.sqrt(v.reduce((a, x) => a + x * x, 0));
    const source = rows[0];
    const sourceNorm = norm(source);
    return rows.slice(1).map((v) => {
        let dot = 0;
        for (let j = 0; j < v.length; j++) {
            dot += v[j] * source[j];
        }
        return dot / Math.max(norm(v) * sourceNorm, 1e-12);
    });
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

// Triton's error for one chunk, in OpenAI's shape; each row it names made the request's
// own: `rowName(offset + i, tensor)`, by default input[offset + i]. `param` is the field
// of the first row named (the name before its [index]), else "input".
function upstreamFailure(status, text, offset, rowName) {
    let message = text;
    try {
        message = JSON.parse(text).error || text;
    } catch (e) {
        // not JSON: keep the text
    }
    const name = rowName || ((i) => "input[" + i + "]");
    let param = null;
    message = message.replace(ROW_REF, (m, tensor, i) => {
        const own = name(offset + Number(i), tensor);
        param = param || own.replace(/\[\d+\]$/, "");
        return own;
    });
    if (status === 400) {
        return failure(400, message, param || "input");
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

// The routes: each parses its body (a pure function), then serves the checked request.
const ROUTES = {
    "/v1/embeddings": [parseRequest, serveEmbeddings],
    "/v1/tokenize": [parseTokenize, serveTokenize],
    "/v1/similarity": [parseSimilarity, serveSimilarity],
    "/v1/classify": [parseClassify, serveClassify],
};

function route(r) {
    return dispatch(r, ROUTES);
}

// Serve `r` by `routes` (uri -> [parse, serve]); any failure answers in OpenAI's shape.
async function dispatch(r, routes) {
    try {
        const found = routes[r.uri];
        if (r.method !== "POST") {
            r.headersOut["Allow"] = "POST";
            respond(r, {status: 405, body: errorBody("use POST for " + r.uri,
                                                     "invalid_request_error", null,
                                                     "method_not_allowed")});
            return;
        }
        const request = found[0](r.requestText || "", loadedTable(), r.headersIn["x-priority"]);
        if (request.error) {
            respond(r, request.error);
            return;
        }
        await found[1](r, request);
    } catch (e) {
        r.error("openai.js: " + r.uri + ": " + e.stack);
        respond(r, failure(500, "internal error of the front door's " + r.uri + " route: " +
                                e.message));
    }
}

// Send `parts` of the request's rows to its front (priority 1 to the front's interactive
// lane where it has one, core/families/lanes.py), each body made by `bodyOf(texts)`:
// {replies} or {error: failure(...)} naming the request's own rows (`rowName`, as
// upstreamFailure takes it).
async function sendParts(r, request, parts, bodyOf, rowName) {
    const model = request.model;
    const target = request.priority === 1 && model.lane ? model.lane : model.front;
    const replies = await inWaves(parts.map((part) => () => r.subrequest(
        "/_triton_plain/v2/models/" + target + "/infer",
        {method: "POST", body: bodyOf(request.texts.slice(part[0], part[1]))})),
        model.in_flight);
    const failed = replies.findIndex((x) => x !== undefined && x.status !== 200);
    if (failed === -1) {
        return {replies: replies};
    }
    return {error: upstreamFailure(replies[failed].status, replies[failed].responseText || "",
                                   parts[failed][0], rowName)};
}

function binaryParts(reply, rows, dimensions, format) {
    const headerLength = Number(reply.headersOut["Inference-Header-Content-Length"]);
    return decodeAnswer(reply.responseBuffer, headerLength, rows, dimensions, format);
}

// The rows of one request to a text model's front: its request rows, fewer (chunk_rows)
// when `truncate` (the request's, else the model's default) cuts texts into windows, so
// a request stays under the front's windows limit.
function partRows(model, truncate) {
    const chunked = truncate === "chunk" ||
        ((truncate === undefined) && model.chunks_by_default === true);
    return chunked ? model.chunk_rows || 1 : model.request_rows;
}

async function serveEmbeddings(r, request) {
    r.variables.openai_user = request.user;
    const model = request.model;
    const parts = chunks(request.texts.length, partRows(model, request.parameters.truncate));
    const sent = await sendParts(r, request, parts, (texts) => kserveBody(
        {[TEXT_INPUT]: texts}, request.priority, request.parameters));
    if (sent.error) {
        respond(r, sent.error);
        return;
    }
    const dimensions = request.parameters.dimensions || model.dimensions;
    const data = [];
    const usage = {prompt_tokens: 0, total_tokens: 0, truncated_tokens: 0, windows: 0};
    for (let p = 0; p < parts.length; p++) {
        const answer = binaryParts(sent.replies[p], parts[p][1] - parts[p][0], dimensions,
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

// Send the request's rows in `plan.parts` (by default chunks of its model's request
// rows), each chunk's inputs made by `plan.inputsOf(texts)`, asking for `plan.outputs` as
// JSON, and return every row of the answers (`plan.rowsOf(answer, offset)`) in order; null
// once a failure (its rows named by `plan.rowName`) has been answered.
async function jsonRows(r, request, plan) {
    const parts = plan.parts || chunks(request.texts.length, request.model.request_rows);
    const sent = await sendParts(r, request, parts, (texts) => kserveBody(
        plan.inputsOf(texts), request.priority, request.parameters,
        plan.outputs.map((name) => [name, false])), plan.rowName);
    if (sent.error) {
        respond(r, sent.error);
        return null;
    }
    return parts.reduce((data, part, p) => data.concat(
        plan.rowsOf(JSON.parse(sent.replies[p].responseText), part[0])), []);
}

async function serveTokenize(r, request) {
    const data = await jsonRows(r, request, {
        inputsOf: (texts) => ({[TEXT_INPUT]: texts}), outputs: Object.keys(COUNTS),
        rowsOf: (answer, offset) => countRows(answer, offset, request.model.max_tokens)});
    if (data === null) {
        return;
    }
    const total = data.reduce((a, row) => a + row.tokens, 0);
    respond(r, {status: 200, body: JSON.stringify({
        object: "list", data: data, model: request.model.id,
        usage: {prompt_tokens: total, total_tokens: total}})});
}

// The similarity request's rows by their own names: the source, then the sentences.
function similarityRow(i) {
    return i === 0 ? "inputs.source_sentence" : "inputs.sentences[" + (i - 1) + "]";
}

async function serveSimilarity(r, request) {
    const n = request.texts.length;
    const sent = await sendParts(r, request, [[0, n]], (texts) => kserveBody(
        {[TEXT_INPUT]: texts}, request.priority, request.parameters), similarityRow);
    if (sent.error) {
        respond(r, sent.error);
        return;
    }
    const dimensions = request.parameters.dimensions || request.model.dimensions;
    const answer = binaryParts(sent.replies[0], n, dimensions, "float");
    const data = cosines(answer.embeddings).map((score, i) => ({
        object: "similarity", index: i, score: score}));
    respond(r, {status: 200, body: JSON.stringify({
        object: "list", data: data, model: request.model.id,
        usage: {prompt_tokens: answer.counts.prompt_tokens,
                total_tokens: answer.counts.prompt_tokens}})});
}

async function serveClassify(r, request) {
    const data = await jsonRows(r, request, {
        inputsOf: (texts) => ({[IMAGE_INPUT]: texts}), outputs: CLASS_OUTPUTS,
        rowsOf: classRows});
    if (data === null) {
        return;
    }
    respond(r, {status: 200, body: JSON.stringify({
        object: "list", data: data, model: request.model.id,
        usage: {images: data.length}})});
}

function modelObject(model, created) {
    return {id: model.id, object: "model", created: created, owned_by: "tmr"};
}

// Every model the routes serve: the text models, the image models, then the rerankers.
function allModels(table) {
    return table.models.concat(table.classifiers || [], table.rerankers || []);
}

function models(r) {
    const table = loadedTable();
    const id = r.uri.replace(/^\/v1\/models\/?/, "");
    if (id === "") {
        respond(r, {status: 200, body: JSON.stringify({
            object: "list", data: allModels(table).map((m) => modelObject(m, table.created))})});
        return;
    }
    const model = modelTable(allModels(table))[decodeURIComponent(id)];
    respond(r, model === undefined ?
        failure(404, "The model '" + decodeURIComponent(id) + "' does not exist", "model",
                "model_not_found") :
        {status: 200, body: JSON.stringify(modelObject(model, table.created))});
}

export default {route, models, parseRequest, parseTokenize, parseSimilarity, parseClassify,
                textParameters, chunks, kserveBody, decodeAnswer, countRows, classRows,
                cosines, policyOutcome, upstreamFailure, similarityRow, failure, errorBody,
                TEXT_INPUT, IMAGE_INPUT, QUERY_INPUT, DOCUMENT_INPUT, TRUNCATE_CHOICES,
                // what rerank.js builds on
                dispatch, parseCommon, partRows, jsonRows, outputsOf, typeOf, respond,
                allModels};
