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
        size_t end = length;
        int32_t id = -1;
        uform_strmap_t const *map = start ? &model->continuations : &model->words;
        while (start < end) {
            id = uform_strmap_get(map, word + start, end - start);
            if (id >= 0) break;
            // Drop the last code point.
            end--;
            while (end > start && ((unsigned char)word[end] & 0xC0) == 0x80) end--;
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
