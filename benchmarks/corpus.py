"""The word-count input: deterministic text whose words follow a Zipf law.

    Corpus(seed, vocabulary=VOCABULARY, s=ZIPF_S)
    corpus.blocks(size) -> iterator of bytes: lines of WORDS_PER_LINE words, in
                           blocks of about BLOCK_BYTES, at least `size` bytes in all
    corpus.reference() -> {word: count} of everything blocks() produced so far

The vocabulary is VOCABULARY distinct lowercase pseudo-words (2-12 letters)
drawn from the seed; word i has probability proportional to 1/(i+1)^s, as
natural text roughly does. The reference count is taken from the sampled word
numbers (numpy.bincount), not from the text, so it checks a word count
independently of how the text is split. The same seed and size give the
same bytes on every machine (numpy's PCG64).
"""

from collections.abc import Iterator

import numpy as np

VOCABULARY = 50_000
ZIPF_S = 1.0
WORDS_PER_LINE = 16
BLOCK_BYTES = 1 << 20
_AVERAGE_WORD_BYTES = 6   # a first guess of words per block; blocks() corrects it


class Corpus:
    def __init__(self, seed: int, vocabulary: int = VOCABULARY, s: float = ZIPF_S):
        self.rng = np.random.default_rng(seed)
        self.words = self._vocabulary(vocabulary)
        weights = 1.0 / np.arange(1, vocabulary + 1) ** s
        self.cdf = np.cumsum(weights / weights.sum())
        self.counts = np.zeros(vocabulary, dtype=np.int64)

    def _vocabulary(self, n: int) -> list[bytes]:
        seen: set[bytes] = set()
        letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", dtype=np.uint8)
        while len(seen) < n:
            for length in self.rng.integers(2, 13, size=n - len(seen)):
                seen.add(letters[self.rng.integers(0, 26, size=length)].tobytes())
        return sorted(seen, key=lambda w: (len(w), w))   # a deterministic order

    def blocks(self, size: int) -> Iterator[bytes]:
        done, per_block = 0, BLOCK_BYTES // _AVERAGE_WORD_BYTES
        per_block -= per_block % WORDS_PER_LINE
        while done < size:
            ranks = np.searchsorted(self.cdf, self.rng.random(per_block), side="right")
            ranks = np.minimum(ranks, len(self.words) - 1)   # float rounding at the top
            self.counts += np.bincount(ranks, minlength=len(self.words))
            words = [self.words[r] for r in ranks.tolist()]
            block = b"\n".join(b" ".join(words[i:i + WORDS_PER_LINE])
                               for i in range(0, len(words), WORDS_PER_LINE)) + b"\n"
            done += len(block)
            yield block

    def reference(self) -> dict[str, int]:
        return {w.decode(): int(c) for w, c in zip(self.words, self.counts, strict=True) if c}
