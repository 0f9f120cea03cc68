/**
 *  @file   wordpiece.c
 *  @brief  WordPiece: greedy longest-match-first over a word, continuations looked up without the
 *          `##` prefix so no string is built per probe; the unknown token for words longer than
 *          `max_input_chars_per_word` or with any unmatched stretch, as `tokenizers` does.
 */
#include "text/text.h"

uform_status_t uform_wordpiece_encode(uform_wordpiece_t const *model, char const *word, size_t length, size_t chars,
                                      uform_scratch_t *scratch) {
    uform_ids_t *ids = &scratch->ids;
    if (chars > model->max_chars) goto unknown;
    size_t first = ids->count;
    size_t start = 0;
    while (start < length) {
        // `tokenizers` tries the rest of the word, then ever shorter prefixes, one code point
        // less each time: the longest prefix in the vocabulary wins. The whole rest is one hash
        // probe (the common case); otherwise one walk of the trie finds the longest prefix (keys
        // are whole code points, so every match ends on a code point boundary).
        size_t longest = start ? model->longest_continuation : model->longest_word;
        size_t end = length;
        int32_t id = -1;
        if (length - start <= longest)
            id = uform_strmap_get(start ? &model->continuations : &model->words, word + start, length - start);
        if (id < 0) {
            uform_trie_t const *trie = start ? &model->continuation_trie : &model->word_trie;
            uint32_t node = 0;
            for (size_t k = start; k < length; k++) {
                int64_t child = uform_trie_child(trie, node, (unsigned char)word[k]);
                if (child < 0) break;
                node = (uint32_t)child;
                if (trie->node_piece[node] >= 0) id = trie->node_piece[node], end = k + 1;
            }
        }
        if (id < 0) {
            ids->count = first;
            goto unknown;
        }
        if (!uform_ids_push(ids, id)) return uform_fail(uform_status_out_of_memory_k, "tokenizer: out of memory");
        start = end;
    }
    return uform_status_ok_k;
unknown:
    if (model->unk_id < 0)
        return uform_fail(uform_status_invalid_argument_k,
                          "tokenizer: a word needs the unknown token, which the vocabulary lacks");
    if (!uform_ids_push(ids, model->unk_id)) return uform_fail(uform_status_out_of_memory_k, "tokenizer: out of memory");
    return uform_status_ok_k;
}
