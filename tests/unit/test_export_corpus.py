"""export.corpus: docstring sentence splitting, the stdlib corpus and parity batches."""

from __future__ import annotations

import pytest

from export.corpus import (
    build_corpus,
    corpus_sha256,
    is_prose,
    long_paragraphs_from_docstring,
    parity_batches,
    sentences_from_docstring,
    texts_from_docstrings,
)

DOCSTRING = """Return the number of items in a container.

    The container may be any sized object. Empty containers give zero! Does it
    handle generators? No, they have no length.

    Example::

        >>> len([1, 2, 3])
        3

    See also: iter(), next().
    """


def test_sentences_from_docstring_splits_prose_into_sentences_in_order() -> None:
    assert sentences_from_docstring(DOCSTRING) == [
        "Return the number of items in a container.",
        "The container may be any sized object.",
        "Empty containers give zero!",
        "Does it handle generators?",
        "No, they have no length.",
    ]


def test_sentences_from_docstring_joins_wrapped_lines() -> None:
    text = "A sentence that is\n    wrapped over\n    three lines."
    assert sentences_from_docstring(text) == ["A sentence that is wrapped over three lines."]


def test_sentences_from_docstring_skips_code_blocks_and_doctests() -> None:
    text = "Compute it.\n\n    x = compute(1)\n    print(x)\n\n>>> compute(2)\n4\n"
    assert sentences_from_docstring(text) == []


def test_sentences_from_docstring_drops_fragments_and_unterminated_text() -> None:
    assert sentences_from_docstring("Two words.") == []
    assert sentences_from_docstring("lowercase start is not a sentence here.") == []
    assert sentences_from_docstring("This line has no final punctuation") == []


def test_sentences_from_docstring_of_empty_text_is_empty() -> None:
    assert sentences_from_docstring("") == []
    assert sentences_from_docstring("\n\n   \n") == []


def test_is_prose_rejects_code_and_symbols() -> None:
    assert is_prose("Return a new list of items.")
    assert not is_prose("Call foo(x) to get it.")
    assert not is_prose("Set value=1 and go on.")
    assert not is_prose("1234 5678 9012 3456.")


def test_long_paragraphs_keep_whole_paragraphs_above_the_word_minimum() -> None:
    long_paragraph = " ".join(["This sentence has exactly six words."] * 8)
    text = f"Short summary line.\n\n{long_paragraph}"
    assert long_paragraphs_from_docstring(text, min_words=40) == [long_paragraph]


def test_texts_from_docstrings_are_deduplicated_and_sorted() -> None:
    texts = texts_from_docstrings(["Zebra crossings are fun.", "All good things end."] * 2)
    assert texts == ["All good things end.", "Zebra crossings are fun."]


def test_build_corpus_is_large_varied_and_deterministic() -> None:
    corpus = build_corpus()
    assert len(corpus) >= 1000
    assert corpus == sorted(set(corpus))
    assert corpus_sha256(corpus) == corpus_sha256(build_corpus())
    word_counts = [len(text.split()) for text in corpus]
    assert min(word_counts) <= 4
    assert max(word_counts) >= 80


def test_corpus_sha256_depends_on_text_boundaries() -> None:
    assert corpus_sha256(["ab", "c"]) != corpus_sha256(["a", "bc"])


def test_parity_batches_have_the_requested_sizes_and_start_with_a_single_word() -> None:
    corpus = [f"Sentence number {i} is here{'.' * (i % 3 + 1)} " + "word " * i for i in range(40)]
    batches = parity_batches(corpus, sizes=(1, 3, 8, 17))
    assert [len(b) for b in batches] == [1, 3, 8, 17]
    assert len(batches[0][0].split()) == 1


def test_parity_batches_mix_shortest_and_longest_texts() -> None:
    short, longest = "Tiny.", "Long " * 50 + "end."
    corpus = [longest, "A medium length sentence here.", short, "Mid size text."]
    three = parity_batches(corpus, sizes=(1, 3, 4))[1]
    assert three[0] == short
    assert three[-1] == longest


def test_parity_batches_largest_batch_exceeds_the_longest_text() -> None:
    corpus = [f"Text {'x' * i}." for i in range(1, 30)]
    last = parity_batches(corpus, sizes=(3, 5))[-1]
    assert len(last[-1]) > max(len(t) for t in corpus)


def test_parity_batches_need_three_distinct_texts() -> None:
    with pytest.raises(ValueError, match="at least 3 distinct"):
        parity_batches(["Same text.", "Same text.", "Other text."])
