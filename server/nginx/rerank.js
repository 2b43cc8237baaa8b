// The rerank routes of the front door (njs): POST /v1/rerank and /v2/rerank in Cohere's
// shape, for the text-ranking family's fronts (cross-encoders; docs/openai.md, "Rerank").
// The query and the documents become pairs, QUERY and DOCUMENT rows of the front model
// (the query repeated on every row), cut into chunks of the model's request rows and
// sent as concurrent subrequests by openai.js's helpers; the SCORE of every pair comes
// back, best first. Pure functions are exported for tests/unit/test_rerank_njs.py.

import openai from 'openai.js';

// Documents in one request, as Cohere recommends at most; the door cuts them into the
// model's batches.
const MAX_DOCUMENTS = 1000;
// A longer query is refused: it is sent once per document, and no reranker reads more.
const MAX_QUERY_BYTES = 16384;
// The JSON bytes of the pairs of one subrequest at most (a single pair may pass it): far
// under the HTTP body that kills Triton 2.51 (client/limits.py), whatever the query.
const PART_BYTES = 2000000;
// Cohere bills a search unit for each query over up to 100 documents.
const SEARCH_UNIT_DOCUMENTS = 100;
// The front's outputs the route reads (client/contract.py's names).
const OUTPUTS = ["SCORE", "TOKENS"];
// Fields of other routes or of Cohere's API that this route refuses rather than ignore.
const EMBEDDING_FIELDS = ["input", "prompt_name", "dimensions", "encoding_format"];
const UNSUPPORTED = {
    rank_fields: "rank_fields is not supported: the model ranks each document's text " +
        "(a string, or the `text` field of an object)",
    max_chunks_per_doc: "max_chunks_per_doc is not supported: send truncate: \"chunk\" " +
        "to score a long document in windows (the model's windows limit applies)",
    priority: "priority in the body is not supported: send the header x-priority: 1 " +
        "(high) or 2 (standard)",
};

function bad(message, param) {
    return {error: openai.failure(400, message, param)};
}

function given(value) {
    return value !== undefined && value !== null;
}

// The checked query, or {error}.
function parseQuery(query) {
    if (!given(query)) {
        return bad("you must provide a query parameter", "query");
    }
    if (typeof query !== "string") {
        return bad("query is " + openai.typeOf(query) + ", not a string", "query");
    }
    if (query.length === 0) {
        return bad("query is an empty string", "query");
    }
    if (Buffer.byteLength(query) > MAX_QUERY_BYTES) {
        return bad("query is " + Buffer.byteLength(query) + " bytes, over the limit of " +
                   MAX_QUERY_BYTES, "query");
    }
    return {query: query};
}

// The text of document `i` (a string, or an object with a `text` string), or {error}.
function documentText(doc, i) {
    const name = "documents[" + i + "]";
    const text = doc !== null && typeof doc === "object" && !Array.isArray(doc) ?
        doc.text : doc;
    if (typeof text !== "string") {
        return bad(name + (text === doc ? " is " + openai.typeOf(doc) + ", not a string" :
                           " has no text string: an object document needs \"text\"") +
                   " (a document is a string or {\"text\": \"...\"})", "documents");
    }
    if (text.length === 0) {
        return bad(name + " is an empty string; every document must have text",
                   "documents");
    }
    return {text: text};
}

// The documents' texts, or {error}.
function parseDocuments(documents) {
    if (!given(documents)) {
        return bad("you must provide a documents parameter", "documents");
    }
    if (!Array.isArray(documents) || documents.length === 0) {
        return bad("documents must be a non-empty array of strings or {\"text\": \"...\"} " +
                   "objects", "documents");
    }
    if (documents.length > MAX_DOCUMENTS) {
        return bad("documents has " + documents.length + " items, over the limit of " +
                   MAX_DOCUMENTS + " per request", "documents");
    }
    const texts = [];
    for (let i = 0; i < documents.length; i++) {
        const doc = documentText(documents[i], i);
        if (doc.error) {
            return doc;
        }
        texts.push(doc.text);
    }
    return {texts: texts};
}

// top_n: null (all), or an integer >= 1.
function parseTopN(topN) {
    if (!given(topN)) {
        return {topN: null};
    }
    if (!Number.isInteger(topN) || topN < 1) {
        return bad("top_n must be an integer >= 1; got " + JSON.stringify(topN), "top_n");
    }
    return {topN: topN};
}

// max_tokens_per_doc: accepted when the model never reads more of a pair anyway (its
// max_tokens); the door does not cut documents itself.
function checkMaxTokens(value, model) {
    if (!given(value)) {
        return null;
    }
    if (!Number.isInteger(value) || value < 1) {
        return bad("max_tokens_per_doc must be an integer >= 1; got " + JSON.stringify(value),
                   "max_tokens_per_doc");
    }
    if (value < model.max_tokens) {
        return bad("max_tokens_per_doc under " + model.id + "'s max_tokens (" +
                   model.max_tokens + ") is not supported: the model cuts each query and " +
                   "document pair at " + model.max_tokens + " tokens (see truncate); got " +
                   value, "max_tokens_per_doc");
    }
    return null;
}

// The first field the route refuses outright, as {error}, or null.
function refusedField(body, model) {
    const unsupported = Object.keys(UNSUPPORTED).filter((key) => given(body[key]))[0];
    if (unsupported !== undefined) {
        return bad(UNSUPPORTED[unsupported], unsupported);
    }
    const spans = body.relevant_spans;
    if (given(spans) && !(typeof spans === "object" && spans.mode === "disabled")) {
        return bad("relevant_spans is not supported: the model scores whole documents",
                   "relevant_spans");
    }
    const embedding = EMBEDDING_FIELDS.filter((key) => given(body[key]))[0];
    if (embedding !== undefined) {
        return bad(embedding + " applies to text-embedding models (/v1/embeddings); " +
                   model.id + " ranks documents", embedding);
    }
    return null;
}

// A boolean field, by default false, or {error}.
function flag(body, key) {
    if (!given(body[key])) {
        return {value: false};
    }
    if (typeof body[key] !== "boolean") {
        return bad(key + " must be true or false; got " + JSON.stringify(body[key]), key);
    }
    return {value: body[key]};
}

// The request's options: {topN, returnDocuments, parameters} (the front's request
// parameters: raw_scores, truncate, chunk_overlap), or {error}.
function parseOptions(body, model) {
    const refused = refusedField(body, model) || checkMaxTokens(body.max_tokens_per_doc, model);
    if (refused) {
        return refused;
    }
    const topN = parseTopN(body.top_n);
    const returnDocuments = flag(body, "return_documents");
    const rawScores = flag(body, "raw_scores");
    const extension = openai.textParameters(body);
    const failed = [topN, returnDocuments, rawScores, extension].filter((x) => x.error)[0];
    if (failed) {
        return failed;
    }
    if (rawScores.value) {
        extension.parameters.raw_scores = true;
    }
    return {topN: topN.topN, returnDocuments: returnDocuments.value,
            parameters: extension.parameters};
}

// The checked request of API `version` ("1" or "2"): {model, version, query, texts,
// documents, topN, returnDocuments, priority, parameters}, or {error: failure(...)}.
function parseRerank(text, table, priorityHeader, version) {
    const common = openai.parseCommon(text, table, "rerankers", priorityHeader);
    if (common.error) {
        return common;
    }
    const body = common.body;
    const query = parseQuery(body.query);
    const docs = query.error ? query : parseDocuments(body.documents);
    const options = docs.error ? docs : parseOptions(body, common.model);
    if (options.error) {
        return options;
    }
    return {model: common.model, version: version, query: query.query, texts: docs.texts,
            documents: options.returnDocuments ? body.documents : null, topN: options.topN,
            returnDocuments: options.returnDocuments, priority: common.priority,
            parameters: options.parameters};
}

function parseV1(text, table, priorityHeader) {
    return parseRerank(text, table, priorityHeader, "1");
}

function parseV2(text, table, priorityHeader) {
    return parseRerank(text, table, priorityHeader, "2");
}

// [start, end) of each subrequest's documents: at most `rows`, and at most PART_BYTES of
// JSON with the query repeated on each row (a single pair goes alone whatever its size).
function rerankParts(query, texts, rows) {
    const queryBytes = Buffer.byteLength(JSON.stringify(query));
    const parts = [];
    let start = 0;
    let bytes = 0;
    for (let i = 0; i < texts.length; i++) {
        const pair = queryBytes + Buffer.byteLength(JSON.stringify(texts[i]));
        if (i > start && (i - start >= rows || bytes + pair > PART_BYTES)) {
            parts.push([start, i]);
            start = i;
            bytes = 0;
        }
        bytes += pair;
    }
    parts.push([start, texts.length]);
    return parts;
}

// The front's inputs for `texts`, each paired with the query.
function pairInputs(query, texts) {
    return {[openai.QUERY_INPUT]: texts.map(() => query), [openai.DOCUMENT_INPUT]: texts};
}

// How the request names a row the front named: the query, or documents[i].
function pairRow(i, tensor) {
    return tensor === openai.QUERY_INPUT ? "query" : "documents[" + i + "]";
}

// The pairs of one chunk's JSON answer, numbered from `offset`: {index, score, tokens}.
function scoreRows(answer, offset) {
    const out = openai.outputsOf(answer);
    return out.SCORE.map((score, i) => ({index: offset + i, score: score,
                                         tokens: out.TOKENS[i]}));
}

// One result: the document as it was sent (a string as {text}) when asked for.
function result(row, request) {
    const item = {index: row.index, relevance_score: row.score};
    if (request.returnDocuments) {
        const doc = request.documents[row.index];
        item.document = typeof doc === "string" ? {text: doc} : doc;
    }
    return item;
}

// Cohere's answer (with `model` and `usage` as vLLM and Jina answer) of every pair's
// `rows`: best first (ties in the order sent), cut to top_n; `id` names the request.
function rankAnswer(rows, request, id) {
    const ranked = rows.slice().sort((a, b) => b.score - a.score || a.index - b.index);
    const tokens = rows.reduce((sum, row) => sum + row.tokens, 0);
    return {
        id: id,
        results: ranked.slice(0, request.topN || ranked.length).map((row) => result(row,
                                                                                   request)),
        meta: {api_version: {version: request.version},
               billed_units: {search_units: Math.ceil(rows.length / SEARCH_UNIT_DOCUMENTS)},
               tokens: {input_tokens: tokens}},
        model: request.model.id,
        usage: {total_tokens: tokens},
    };
}

async function serveRerank(r, request) {
    const query = request.query;
    const rows = await openai.jsonRows(r, request, {
        parts: rerankParts(query, request.texts,
                           openai.partRows(request.model, request.parameters.truncate)),
        inputsOf: (texts) => pairInputs(query, texts), outputs: OUTPUTS,
        rowsOf: scoreRows, rowName: pairRow});
    if (rows === null) {
        return;
    }
    openai.respond(r, {status: 200, body: JSON.stringify(rankAnswer(
        rows, request, r.variables.request_id))});
}

const ROUTES = {
    "/v1/rerank": [parseV1, serveRerank],
    "/v2/rerank": [parseV2, serveRerank],
};

function route(r) {
    return openai.dispatch(r, ROUTES);
}

export default {route, parseRerank, rerankParts, pairInputs, pairRow, scoreRows, rankAnswer,
                MAX_DOCUMENTS, MAX_QUERY_BYTES, PART_BYTES, OUTPUTS};
