/**
 *  @file   text.h
 *  @brief  What the tokenizer's source files share: a string-to-id hash, growable scratch arrays,
 *          and the WordPiece and Unigram models. Internal to src/text/.
 */
#ifndef UFORM_TEXT_TEXT_H
#define UFORM_TEXT_TEXT_H

#include "internal.h"
#include "text/tokenizer.h"
#include "text/unicode.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- String to id: open addressing over keys kept in one blob ---- */

typedef struct uform_strmap_slot_t {
    uint32_t hash;   /**< High bits of the key's hash; 0 marks an empty slot (hashes are forced nonzero). */
    int32_t id;      /**< The value. */
    uint32_t offset; /**< The key: `blob[offset, offset + length)`. */
    uint32_t length;
} uform_strmap_slot_t;

typedef struct uform_strmap_t {
    uform_strmap_slot_t *slots;
    size_t mask;  /**< Slots minus one; a power of two minus one. */
    size_t count; /**< Keys held. */
    char const *blob;
} uform_strmap_t;

uint64_t uform_hash_bytes(void const *data, size_t length);
/** @brief Sizes the table for `expected` keys over `blob` (which must outlive the map). */
uform_status_t uform_strmap_init(uform_strmap_t *map, size_t expected, char const *blob);
/** @brief Maps `blob[offset, offset + length)` to `id`; a key already present takes the new id. */
void uform_strmap_put(uform_strmap_t *map, uint32_t offset, uint32_t length, int32_t id);
/** @brief The id of `key`, or -1. */
int32_t uform_strmap_get(uform_strmap_t const *map, char const *key, size_t length);
void uform_strmap_free(uform_strmap_t *map);

/* ---- A byte trie: children in one open-addressing table keyed by (node, byte) ---- */

typedef struct uform_trie_slot_t {
    uint64_t key;   /**< ((node << 8) | byte) + 1; 0 marks an empty slot. */
    uint32_t child; /**< The child node. */
    uint32_t unused;
} uform_trie_slot_t;

typedef struct uform_trie_t {
    uform_trie_slot_t *slots;
    size_t mask;
    int32_t *node_piece; /**< Per node: the id of the key ending there, or -1. */
    size_t nodes, capacity;
} uform_trie_t;

/** @brief Sizes the trie for keys of `total_bytes` bytes together. */
uform_status_t uform_trie_init(uform_trie_t *trie, size_t total_bytes);
/** @brief Adds a key (an empty one is ignored; a key added again takes the new id); false when out
 *  of memory. */
bool uform_trie_insert(uform_trie_t *trie, unsigned char const *key, size_t length, int32_t id);
void uform_trie_free(uform_trie_t *trie);

static inline int64_t uform_trie_child(uform_trie_t const *trie, uint32_t node, unsigned char byte) {
    uint64_t key = (((uint64_t)node << 8) | byte) + 1;
    for (size_t i = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 29) & trie->mask;; i = (i + 1) & trie->mask) {
        // (the table is never full: it doubles at half load)
        uint64_t k = trie->slots[i].key;
        if (k == key) return trie->slots[i].child;
        if (k == 0) return -1;
    }
}

/* ---- Per-call scratch ---- */

typedef struct uform_ids_t {
    int32_t *data;
    size_t count, capacity;
} uform_ids_t;

/** @brief Appends one id; false when out of memory. */
static inline bool uform_ids_push(uform_ids_t *ids, int32_t id) {
    if (UFORM_UNLIKELY(ids->count == ids->capacity)) {
        extern bool uform_ids_grow(uform_ids_t * ids, size_t at_least);
        if (!uform_ids_grow(ids, ids->count + 1)) return false;
    }
    ids->data[ids->count++] = id;
    return true;
}

/** @brief Everything one encode call allocates, released together. */
typedef struct uform_scratch_t {
    uint32_t *a, *b;      /**< Code points, swapped between normaliser steps. */
    size_t a_cap, b_cap;
    char *bytes;          /**< One word in UTF-8. */
    size_t bytes_cap;
    double *scores;       /**< Unigram's best path: score per byte position. */
    int32_t *starts, *pieces;
    size_t lattice_cap;
    uform_ids_t ids;      /**< The content ids, before specials. */
    size_t limit;         /**< Stop once `ids.count` reaches this (truncation); SIZE_MAX for none. */
} uform_scratch_t;

bool uform_scratch_reserve_u32(uint32_t **buffer, size_t *capacity, size_t count);
void uform_scratch_free(uform_scratch_t *scratch);

/* ---- WordPiece (wordpiece.c) ---- */

typedef struct uform_wordpiece_t {
    uform_strmap_t words;         /**< Pieces that start a word. */
    uform_strmap_t continuations; /**< Pieces after the continuing prefix, keyed without it. */
    uform_trie_t word_trie;       /**< The same keys as tries, for the longest prefix in one walk. */
    uform_trie_t continuation_trie;
    int32_t unk_id;               /**< -1 when the unknown token is not in the vocabulary. */
    size_t max_chars;             /**< Longer words become the unknown token. */
    size_t longest_word;          /**< Bytes of the longest key in `words`: no longer prefix can match. */
    size_t longest_continuation;  /**< The same for `continuations`. */
} uform_wordpiece_t;

/** @brief Appends the ids of one pre-tokenized word (`chars` code points, `length` bytes). */
uform_status_t uform_wordpiece_encode(uform_wordpiece_t const *model, char const *word, size_t length, size_t chars,
                                      uform_scratch_t *scratch);

/* ---- Unigram (unigram.c) ---- */

typedef struct uform_unigram_t {
    uform_trie_t trie;     /**< Every piece. */
    double *scores;        /**< Per id. */
    size_t pieces;
    double min_score;
    int32_t unk_id;        /**< -1 when the model has none. */
    bool byte_fallback;
    int32_t byte_ids[256]; /**< `<0xXX>` pieces, -1 where absent. */
    uform_strmap_t lookup; /**< Piece string to id (last duplicate wins, as in `tokenizers`). */
} uform_unigram_t;

/** @brief Builds the trie over pieces `blob[offsets[i], offsets[i] + lengths[i])`. */
uform_status_t uform_unigram_build(uform_unigram_t *model, char const *blob, uint32_t const *offsets,
                                   uint32_t const *lengths, size_t count);
uform_status_t uform_unigram_encode(uform_unigram_t const *model, char const *piece, size_t length,
                                    uform_scratch_t *scratch);
void uform_unigram_free(uform_unigram_t *model);

#endif // UFORM_TEXT_TEXT_H
