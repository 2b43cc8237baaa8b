"""perf.long_inputs' pure parts: the texts it sends and the tables it writes."""

from __future__ import annotations

import itertools

from perf import long_inputs
from perf.stats import LoadPoint


def point(c: int, rps: float, p99: float) -> LoadPoint:
    return LoadPoint(c, 8.0, int(rps * 8), 0, rps, p99 / 2, p99 * 0.9, p99)


def test_passages_are_about_200_tokens_of_real_text():
    encoder = long_inputs.front_tokenizer()
    passages = long_inputs.passages()
    assert len(passages) > 50
    lengths = [len(ids) for ids in encoder.token_ids(passages)]
    assert all(abs(n - long_inputs.PASSAGE_TOKENS) <= 40 for n in lengths)


def test_the_length_mix_is_new_texts_about_a_third_of_them_passages():
    texts = list(itertools.islice(long_inputs.length_mix(seed=1), 2000))
    assert len(set(texts)) == len(texts)
    long = sum(len(t) > 500 for t in texts) / len(texts)
    assert abs(long - long_inputs.PASSAGE_SHARE) < 0.05


def test_the_repeats_come_from_a_small_pool():
    texts = list(itertools.islice(long_inputs.repeats(seed=1), 500))
    assert len(set(texts)) <= long_inputs.POOL


def test_the_ten_thousand_token_document_is_real_text_of_that_length():
    encoder = long_inputs.front_tokenizer()
    document = long_inputs.ten_thousand_tokens()
    assert abs(len(encoder.token_ids([document])[0]) - 10_000) <= 5
    assert document.startswith("# ")


def test_a_load_table_gives_each_variant_its_ratio_to_the_base():
    best = {"buckets": [point(4, 100, 50), point(16, 120, 200)],
            "tokens-1024": [point(4, 110, 40), point(16, 96, 300)]}
    table = long_inputs.load_table(best, [4, 16], "buckets")
    assert "| buckets | 100.0 | 120.0 | 50.0 | 200.0 | 1.00x / 1.00x | 1.00x / 1.00x |" in table
    assert "| tokens-1024 | 110.0 | 96.0 | 40.0 | 300.0 | 1.10x / 0.80x | 0.80x / 1.50x |" \
        in table
