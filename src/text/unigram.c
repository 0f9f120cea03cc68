/**
 *  @file   unigram.c
 *  @brief  Unigram (SentencePiece-style): Viterbi over a byte trie of the pieces, in the order and
 *          with the tie-breaking of `tokenizers`' optimised encoder (starts left to right, shorter
 *          pieces first, a later candidate wins only when strictly better), unknown code points
 *          scored `min_score - 10`, consecutive unknowns fused, byte fallback as the JSON says.
 */
#include "text/text.h"

#include <stdlib.h>
#include <string.h>

uform_status_t uform_trie_init(uform_trie_t *trie, size_t total_bytes) {
    // Nodes are at most total_bytes + 1; the child table starts small and doubles as nodes come
    // (shared prefixes make the real count far smaller, and a small table stays in cache).
    trie->node_piece = malloc((total_bytes + 1) * sizeof(int32_t));
    trie->slots = calloc(1024, sizeof(uform_trie_slot_t));
    if (!trie->slots || !trie->node_piece) return uform_fail(uform_status_out_of_memory_k, "tokenizer: out of memory for a trie");
    trie->mask = 1023;
    trie->nodes = 1, trie->capacity = total_bytes + 1;
    trie->node_piece[0] = -1;
    return uform_status_ok_k;
}

static inline size_t trie_home(uint64_t key, size_t mask) { return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 29) & mask; }

/** Doubles the child table; false when out of memory (the trie stays as it was). */
static bool trie_grow(uform_trie_t *trie) {
    size_t slots = (trie->mask + 1) * 2;
    uform_trie_slot_t *grown = calloc(slots, sizeof(uform_trie_slot_t));
    if (!grown) return false;
    for (size_t i = 0; i <= trie->mask; i++) {
        if (!trie->slots[i].key) continue;
        size_t j = trie_home(trie->slots[i].key, slots - 1);
        while (grown[j].key) j = (j + 1) & (slots - 1);
        grown[j] = trie->slots[i];
    }
    free(trie->slots);
    trie->slots = grown, trie->mask = slots - 1;
    return true;
}

bool uform_trie_insert(uform_trie_t *trie, unsigned char const *key, size_t length, int32_t id) {
    if (!length) return true; // the root is never a match, as in `tokenizers`
    uint32_t node = 0;
    for (size_t k = 0; k < length; k++) {
        int64_t child = uform_trie_child(trie, node, key[k]);
        if (child < 0) {
            if (trie->nodes * 2 >= trie->mask + 1 && !trie_grow(trie)) return false;
            uint64_t slot_key = (((uint64_t)node << 8) | key[k]) + 1;
            size_t i = trie_home(slot_key, trie->mask);
            while (trie->slots[i].key) i = (i + 1) & trie->mask;
            trie->slots[i].key = slot_key;
            trie->slots[i].child = (uint32_t)trie->nodes;
            trie->node_piece[trie->nodes] = -1;
            child = (int64_t)trie->nodes++;
        }
        node = (uint32_t)child;
    }
    trie->node_piece[node] = id;
    return true;
}

void uform_trie_free(uform_trie_t *trie) {
    free(trie->slots), free(trie->node_piece);
    trie->slots = NULL, trie->node_piece = NULL;
}

uform_status_t uform_unigram_build(uform_unigram_t *model, char const *blob, uint32_t const *offsets,
                                   uint32_t const *lengths, size_t count) {
    size_t total = 0;
    for (size_t i = 0; i < count; i++) total += lengths[i];
    uform_status_t status = uform_trie_init(&model->trie, total);
    if (status != uform_status_ok_k) return status;
    for (size_t id = 0; id < count; id++)
        if (!uform_trie_insert(&model->trie, (unsigned char const *)blob + offsets[id], lengths[id], (int32_t)id))
            return uform_fail(uform_status_out_of_memory_k, "tokenizer: out of memory for the Unigram trie");
    return uform_status_ok_k;
}

void uform_unigram_free(uform_unigram_t *model) {
    uform_trie_free(&model->trie);
    free(model->scores);
    uform_strmap_free(&model->lookup);
}

static inline size_t utf8_length(unsigned char lead) {
    return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}

/** Emits a run of unknown code points `piece[start, end)` as `tokenizers` does after fusing them. */
static uform_status_t emit_unknown(uform_unigram_t const *model, char const *piece, size_t start, size_t end,
                                   uform_ids_t *ids) {
    int32_t id = uform_strmap_get(&model->lookup, piece + start, end - start);
    if (id < 0 && model->byte_fallback) {
        bool all = true;
        for (size_t k = start; k < end && all; k++) all = model->byte_ids[(unsigned char)piece[k]] >= 0;
        if (all) {
            for (size_t k = start; k < end; k++)
                if (!uform_ids_push(ids, model->byte_ids[(unsigned char)piece[k]]))
                    return uform_fail(uform_status_out_of_memory_k, "tokenizer: out of memory");
            return uform_status_ok_k;
        }
    }
    if (id < 0) id = model->unk_id;
    if (!uform_ids_push(ids, id)) return uform_fail(uform_status_out_of_memory_k, "tokenizer: out of memory");
    return uform_status_ok_k;
}

/** `emit_unknown` for the backward walk: byte fallback emits in forward order, so the run's ids are
 *  reversed here to stay forward after the walk's final reversal. */
static uform_status_t emit_unknown_backwards(uform_unigram_t const *model, char const *piece, size_t run_start,
                                             size_t run_end, uform_ids_t *ids) {
    size_t const before = ids->count;
    uform_status_t status = emit_unknown(model, piece, run_start, run_end, ids);
    if (status != uform_status_ok_k) return status;
    for (size_t a = before, b = ids->count - 1; before < ids->count && a < b; a++, b--) {
        int32_t t = ids->data[a];
        ids->data[a] = ids->data[b], ids->data[b] = t;
    }
    return uform_status_ok_k;
}

uform_status_t uform_unigram_encode(uform_unigram_t const *model, char const *piece, size_t length,
                                    uform_scratch_t *scratch) {
    if (!length) return uform_status_ok_k;
    if (scratch->lattice_cap < length + 1) {
        size_t cap = length + 1 > scratch->lattice_cap * 2 ? length + 1 : scratch->lattice_cap * 2;
        double *scores = realloc(scratch->scores, cap * sizeof(double));
        if (scores) scratch->scores = scores;
        int32_t *starts = realloc(scratch->starts, cap * sizeof(int32_t));
        if (starts) scratch->starts = starts;
        int32_t *pieces = realloc(scratch->pieces, cap * sizeof(int32_t));
        if (pieces) scratch->pieces = pieces;
        if (!scores || !starts || !pieces) return uform_fail(uform_status_out_of_memory_k, "tokenizer: out of memory");
        scratch->lattice_cap = cap;
    }
    double *best = scratch->scores;
    int32_t *from = scratch->starts, *ids_at = scratch->pieces;
    for (size_t i = 0; i <= length; i++) from[i] = -1;
    best[0] = 0;
    double unk_score = model->min_score - 10.0;
    unsigned char const *bytes = (unsigned char const *)piece;
    for (size_t start = 0; start < length;) {
        double here = best[start];
        size_t mblen = utf8_length(bytes[start]);
        bool single = false;
        uint32_t node = 0;
        for (size_t end = start; end < length; end++) {
            int64_t child = uform_trie_child(&model->trie, node, bytes[end]);
            if (child < 0) break;
            node = (uint32_t)child;
            int32_t id = model->trie.node_piece[node];
            if (id < 0) continue;
            size_t key = end + 1;
            double candidate = model->scores[id] + here;
            if (from[key] < 0 || candidate > best[key]) best[key] = candidate, from[key] = (int32_t)start, ids_at[key] = id;
            if (key - start == mblen) single = true;
        }
        if (!single) {
            size_t key = start + mblen;
            double candidate = unk_score + here;
            if (from[key] < 0 || candidate > best[key]) {
                if (model->unk_id < 0)
                    return uform_fail(uform_status_invalid_argument_k,
                                      "tokenizer: a character has no piece and the Unigram model has no unk_id");
                best[key] = candidate, from[key] = (int32_t)start, ids_at[key] = model->unk_id;
            }
        }
        start += mblen;
    }
    // Walk the best path back from the end, emitting ids backwards; the stretch is reversed last.
    uform_ids_t *ids = &scratch->ids;
    size_t first = ids->count;
    // Emit backwards into the ids array, then reverse the emitted stretch.
    size_t run_end = 0; // end of a pending run of unknowns (0: none)
    size_t run_start = 0;
    for (size_t end = length; end > 0;) {
        size_t start = (size_t)from[end];
        int32_t id = ids_at[end];
        if (id == model->unk_id) {
            if (!run_end) run_end = end;
            run_start = start;
        } else {
            if (run_end) {
                uform_status_t status = emit_unknown_backwards(model, piece, run_start, run_end, ids);
                if (status != uform_status_ok_k) return status;
                run_end = 0;
            }
            if (!uform_ids_push(ids, id)) return uform_fail(uform_status_out_of_memory_k, "tokenizer: out of memory");
        }
        end = start;
    }
    if (run_end) {
        uform_status_t status = emit_unknown_backwards(model, piece, run_start, run_end, ids);
        if (status != uform_status_ok_k) return status;
    }
    for (size_t a = first, b = ids->count ? ids->count - 1 : 0; a < b; a++, b--) {
        int32_t t = ids->data[a];
        ids->data[a] = ids->data[b], ids->data[b] = t;
    }
    return uform_status_ok_k;
}
