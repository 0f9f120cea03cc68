/**
 *  @file   tokenizer_encode.c
 *  @brief  The encode pipeline of Hugging Face `tokenizers`: added tokens split out of the raw text,
 *          then per stretch the normaliser, the pre-tokeniser and the model, then truncation and the
 *          post-processor's specials. Only ids are produced, so no offsets are tracked.
 */
#include "text/tokenizer_private.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ---- Encoding ---- */

#define OOM() uform_fail(uform_status_out_of_memory_k, "tokenizer: out of memory")

/** Makes `b` hold at least `count`, then swaps `a` and `b` after the step writes `b`. */
static inline void swap_buffers(uform_scratch_t *s) {
    uint32_t *t = s->a;
    size_t c = s->a_cap;
    s->a = s->b, s->a_cap = s->b_cap;
    s->b = t, s->b_cap = c;
}

/* `lead` (in the scratch) counts the leading code points that come from the text's first one, as
 * `tokenizers`' alignments would say: Metaspace's "first" prepends only where the normalised text
 * still starts there (a normaliser can drop the first character: a leading accent, a control). Each
 * step maps it through: LEAD_MARK(i) at the top of a loop over inputs records the output position
 * of input `lead`; LEAD_END after the loop. */
#define LEAD_MARK(i)                                                                               \
    do {                                                                                           \
        if (!lead_done && (i) >= s->lead) new_lead = w, lead_done = true;                          \
    } while (0)
#define LEAD_END()                                                                                 \
    do {                                                                                           \
        if (!lead_done) new_lead = w;                                                              \
        s->lead = new_lead, lead_done = false;                                                     \
    } while (0)

/** The lead through a normal form: what the first `lead` code points decompose to (reordering
 *  aside); a composing form keeps the first code point, which then holds the text's first. */
static size_t lead_through(uint32_t const *in, size_t lead, uform_normal_form_t form) {
    if (!lead) return 0;
    if (lead > 8) return lead;
    uint32_t out[8 * 18 + 4];
    bool compose = form == uform_nfc_k || form == uform_nfkc_k;
    size_t n = uform_normalize(in, lead, compose ? (form == uform_nfc_k ? uform_nfd_k : uform_nfkd_k) : form, out);
    return compose ? (n > 0) : n;
}

/** Lower-cases the `*n` code points of `s->a` as `tokenizers` does (one may become up to three),
 *  mapping the lead through; false when out of memory. */
static bool lowercase(uform_scratch_t *s, size_t *n) {
    if (!uform_scratch_reserve_u32(&s->b, &s->b_cap, *n * 3 + 1)) return false;
    size_t w = 0, new_lead = 0;
    bool lead_done = false;
    for (size_t i = 0; i < *n; i++) {
        LEAD_MARK(i);
        w += uform_hf_lower(s->a[i], s->b + w);
    }
    LEAD_END();
    swap_buffers(s), *n = w;
    return true;
}

static uform_status_t run_step(step_t const *step, uform_scratch_t *s, size_t *count) {
    size_t n = *count, w = 0, new_lead = 0;
    bool lead_done = false;
    switch (step->kind) {
    case step_bert_k: {
        if (!uform_scratch_reserve_u32(&s->b, &s->b_cap, n * 3 + 1)) return OOM();
        bool any_wide = false;
        for (size_t i = 0; i < n; i++) {
            LEAD_MARK(i);
            uint32_t c = s->a[i];
            if (step->clean_text) {
                if (c == 0 || c == 0xFFFD) continue;
                if (c != '\t' && c != '\n' && c != '\r' && uform_hf_is_other(c)) continue;
                if (uform_is_whitespace(c)) c = ' ';
            }
            if (c >= 0x80) any_wide = true;
            if (step->chinese && c >= 0x3400 && uform_is_cjk(c)) {
                s->b[w++] = ' ', s->b[w++] = c, s->b[w++] = ' ';
                continue;
            }
            else if (step->lowercase && c >= 'A' && c <= 'Z') c += 32;
            s->b[w++] = c;
        }
        LEAD_END();
        swap_buffers(s), n = w;
        if (!any_wide) break; // ASCII: nothing decomposes, and the letters are lower-cased already
        if (step->strip_accents) {
            if (!uform_scratch_reserve_u32(&s->b, &s->b_cap, uform_normalize_capacity(s->a, n, uform_nfd_k))) return OOM();
            s->lead = lead_through(s->a, s->lead, uform_nfd_k);
            n = uform_normalize(s->a, n, uform_nfd_k, s->b);
            w = 0;
            for (size_t i = 0; i < n; i++) {
                LEAD_MARK(i);
                if (!uform_hf_is_mn(s->b[i])) s->b[w++] = s->b[i];
            }
            LEAD_END();
            swap_buffers(s), n = w;
        }
        if (step->lowercase && !lowercase(s, &n)) return OOM();
        break;
    }
    case step_nfd_k: case step_nfkd_k: case step_nfc_k: case step_nfkc_k: {
        uform_normal_form_t form = step->kind == step_nfd_k    ? uform_nfd_k
                                   : step->kind == step_nfkd_k ? uform_nfkd_k
                                   : step->kind == step_nfc_k  ? uform_nfc_k
                                                               : uform_nfkc_k;
        if (!uform_scratch_reserve_u32(&s->b, &s->b_cap, uform_normalize_capacity(s->a, n, form))) return OOM();
        s->lead = lead_through(s->a, s->lead, form);
        n = uform_normalize(s->a, n, form, s->b);
        swap_buffers(s);
        break;
    }
    case step_lowercase_k:
        if (!lowercase(s, &n)) return OOM();
        break;
    case step_strip_accents_k:
        for (size_t i = 0; i < n; i++) {
            LEAD_MARK(i);
            if (!uform_hf_is_mark(s->a[i])) s->a[w++] = s->a[i];
        }
        LEAD_END();
        n = w;
        break;
    case step_strip_k: {
        size_t first = 0, last = n;
        if (step->left) while (first < last && uform_is_whitespace(s->a[first])) first++;
        if (step->right) while (last > first && uform_is_whitespace(s->a[last - 1])) last--;
        memmove(s->a, s->a + first, (last - first) * sizeof(uint32_t));
        n = last - first;
        s->lead = s->lead > first ? s->lead - first : 0;
        if (s->lead > n) s->lead = n;
        break;
    }
    case step_prepend_k:
        if (!n) break;
        if (!uform_scratch_reserve_u32(&s->b, &s->b_cap, n + step->content_length + 1)) return OOM();
        if (step->content_length) memcpy(s->b, step->content, step->content_length * sizeof(uint32_t));
        memcpy(s->b + step->content_length, s->a, n * sizeof(uint32_t));
        swap_buffers(s), n += step->content_length;
        if (s->lead) s->lead += step->content_length; // aligned with the first code point
        break;
    case step_replace_k: {
        size_t p = step->pattern_length, r = step->content_length;
        size_t bound = r > p ? n / p * (r - p) + n + 1 : n + 1;
        if (!uform_scratch_reserve_u32(&s->b, &s->b_cap, bound)) return OOM();
        for (size_t i = 0; i < n;) {
            if (i + p <= n && !memcmp(s->a + i, step->pattern, p * sizeof(uint32_t))) {
                /* `tokenizers` aligns the replacement with the match's last code point: a pattern of
                 * two or more at the start leaves the text no longer starting at its start. */
                LEAD_MARK(i + p - 1);
                if (r) memcpy(s->b + w, step->content, r * sizeof(uint32_t));
                w += r, i += p;
            } else {
                LEAD_MARK(i);
                s->b[w++] = s->a[i++];
            }
        }
        LEAD_END();
        swap_buffers(s), n = w;
        break;
    }
    }
    *count = n;
    return uform_status_ok_k;
}

/** Runs the model on one pre-tokenized word given as code points. */
static uform_status_t run_model(uform_tokenizer_t const *tokenizer, uint32_t const *word, size_t chars,
                                uform_scratch_t *s) {
    if (!chars) return uform_status_ok_k;
    size_t length = 0;
    for (size_t i = 0; i < chars; i++) length += uform_utf8_put(word[i], s->bytes + length);
    if (tokenizer->model == model_wordpiece_k)
        return uform_wordpiece_encode(&tokenizer->wordpiece, s->bytes, length, chars, s);
    return uform_unigram_encode(&tokenizer->unigram, s->bytes, length, s);
}

/** Normalises, pre-tokenizes and encodes one stretch of text between added tokens. */
static uform_status_t encode_stretch(uform_tokenizer_t const *tokenizer, char const *text, size_t length,
                                     bool at_start, uform_scratch_t *s) {
    if (!uform_scratch_reserve_u32(&s->a, &s->a_cap, length + 2)) return OOM();
    size_t n = uform_utf8_decode(text, length, s->a);
    s->lead = n > 0;
    for (size_t i = 0; i < tokenizer->steps_count; i++) {
        uform_status_t status = run_step(&tokenizer->steps[i], s, &n);
        if (status != uform_status_ok_k) return status;
    }
    at_start = at_start && s->lead > 0; // the normalised text still starts at the text's start
    // Room for the words' UTF-8 (and a prepended replacement).
    if (s->bytes_cap < n * 4 + 8) {
        char *bytes = realloc(s->bytes, n * 4 + 8);
        if (!bytes) return OOM();
        s->bytes = bytes, s->bytes_cap = n * 4 + 8;
    }
    uint32_t *cps = s->a;
    uform_status_t status = uform_status_ok_k;
    switch (tokenizer->pre) {
    case pre_none_k: return run_model(tokenizer, cps, n, s);
    case pre_bert_k:
    case pre_whitespace_split_k: {
        size_t start = 0;
        for (size_t i = 0; i <= n && status == uform_status_ok_k; i++) {
            if (s->ids.count >= s->limit) return uform_status_ok_k;
            if (i == n || uform_is_whitespace(cps[i])) {
                status = run_model(tokenizer, cps + start, i - start, s);
                start = i + 1;
            } else if (tokenizer->pre == pre_bert_k && uform_hf_is_punct(cps[i])) {
                status = run_model(tokenizer, cps + start, i - start, s);
                if (status == uform_status_ok_k && s->ids.count < s->limit) status = run_model(tokenizer, cps + i, 1, s);
                start = i + 1;
            }
        }
        return status;
    }
    case pre_metaspace_k: {
        if (!n) return uform_status_ok_k; // `tokenizers` drops empty stretches before pre-tokenizing
        if (!uform_scratch_reserve_u32(&s->a, &s->a_cap, n + 1)) return OOM();
        cps = s->a;
        uint32_t r = tokenizer->replacement;
        for (size_t i = 0; i < n; i++)
            if (cps[i] == ' ') cps[i] = r;
        bool prepend = tokenizer->prepend == prepend_always_k || (tokenizer->prepend == prepend_first_k && at_start);
        if (prepend && (n == 0 || cps[0] != r)) {
            memmove(cps + 1, cps, n * sizeof(uint32_t));
            cps[0] = r, n++;
        }
        if (!tokenizer->split) return run_model(tokenizer, cps, n, s);
        size_t start = 0;
        for (size_t i = 1; i <= n && status == uform_status_ok_k; i++) {
            if (s->ids.count >= s->limit) return uform_status_ok_k;
            if (i == n || cps[i] == r) {
                status = run_model(tokenizer, cps + start, i - start, s);
                start = i;
            }
        }
        return status;
    }
    }
    return status;
}

/** The longest added token matching at `text[i]`, or NULL: one walk down their trie, at most
 *  TOKENIZER_ADDED_MAX_BYTES steps whatever the number of added tokens. */
static added_t const *match_added(uform_tokenizer_t const *tokenizer, char const *text, size_t length, size_t i) {
    uform_trie_t const *trie = &tokenizer->added_trie;
    added_t const *best = NULL;
    uint32_t node = 0;
    for (size_t k = i; k < length; k++) {
        int64_t const child = uform_trie_child(trie, node, (unsigned char)text[k]);
        if (child < 0) break;
        node = (uint32_t)child;
        if (trie->node_piece[node] >= 0) best = &tokenizer->added[trie->node_piece[node]];
    }
    return best;
}

/** Code point at `text[i]` and its byte length (valid UTF-8). */
static uint32_t code_point_at(char const *text, size_t i, size_t *bytes) {
    uint32_t c;
    unsigned char b = (unsigned char)text[i];
    *bytes = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
    uform_utf8_decode(text + i, *bytes, &c);
    return c;
}

/** The code point ending just before `text[i]`, and its length. */
static uint32_t code_point_before(char const *text, size_t i, size_t *bytes) {
    size_t j = i - 1;
    while (j > 0 && ((unsigned char)text[j] & 0xC0) == 0x80) j--;
    return code_point_at(text, j, bytes);
}

/* Each thread keeps its scratch between calls (released when the thread exits), so the steady state
 * allocates nothing; buffers a very long text grew are released after its call. */
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static bool scratch_key_made = false;

static void scratch_destroy(void *scratch) {
    uform_scratch_free(scratch);
    free(scratch);
}

static void scratch_key_create(void) { scratch_key_made = pthread_key_create(&scratch_key, scratch_destroy) == 0; }

/** This thread's scratch, or a fresh one when there is no key (`*owned` then says to free it). */
static uform_scratch_t *scratch_acquire(bool *owned) {
    pthread_once(&scratch_once, scratch_key_create);
    uform_scratch_t *scratch = scratch_key_made ? pthread_getspecific(scratch_key) : NULL;
    *owned = false;
    if (scratch) return scratch;
    scratch = calloc(1, sizeof(uform_scratch_t));
    if (!scratch) return NULL;
    if (!scratch_key_made || pthread_setspecific(scratch_key, scratch) != 0) *owned = true;
    return scratch;
}

static void scratch_release(uform_scratch_t *scratch, bool owned) {
    enum { keep = 1 << 20 }; // elements kept between calls, per buffer
    if (owned || scratch->a_cap > keep || scratch->b_cap > keep || scratch->bytes_cap > 4 * keep ||
        scratch->lattice_cap > keep || scratch->ids.capacity > keep) {
        uform_scratch_free(scratch);
        memset(scratch, 0, sizeof *scratch);
        if (owned) free(scratch);
    }
}

uform_status_t uform_tokenizer_encode(uform_tokenizer_t const *tokenizer, char const *text, size_t length,
                                      size_t max_tokens, int32_t *ids, size_t capacity, size_t *count) {
    if (!tokenizer || !count || (!text && length) || (!ids && capacity))
        return uform_fail(uform_status_invalid_argument_k, "uform_tokenizer_encode: %s is NULL",
                          !tokenizer ? "tokenizer" : !count ? "count" : !ids && capacity ? "ids" : "text");
    *count = 0;
    if (!text) text = "";
    size_t invalid = uform_utf8_invalid_offset(text, length);
    if (invalid != length)
        return uform_fail(uform_status_invalid_argument_k, "text: invalid UTF-8 at byte %zu (0x%02X)", invalid,
                          (unsigned)(unsigned char)text[invalid]);
    size_t specials = tokenizer->prefix_count + tokenizer->suffix_count;
    if (max_tokens && max_tokens < specials)
        return uform_fail(uform_status_invalid_argument_k,
                          "uform_tokenizer_encode: max_tokens %zu leaves no room for the %zu special tokens", max_tokens,
                          specials);
    char *prompted = NULL; // the prompt and the text, tokenised as one
    if (tokenizer->prompt_length) {
        if (length > SIZE_MAX - tokenizer->prompt_length || !(prompted = malloc(tokenizer->prompt_length + length)))
            return OOM();
        memcpy(prompted, tokenizer->prompt, tokenizer->prompt_length);
        if (length) memcpy(prompted + tokenizer->prompt_length, text, length);
        text = prompted, length += tokenizer->prompt_length;
    }
    bool owned;
    uform_scratch_t *scratch = scratch_acquire(&owned);
    if (!scratch) return free(prompted), OOM();
    uform_scratch_t s = *scratch; // a local copy for the compiler; written back below
    s.ids.count = 0;
    if (tokenizer->processor_truncation) {
        /* HF's truncation from tokenizer.json, if any (specials kept), then the ids sliced to
         * max_tokens: the content may take every place after the prefix; the suffix what is left. */
        size_t const prefix = tokenizer->prefix_count;
        s.limit = tokenizer->json_max_length ? tokenizer->json_max_length - specials : SIZE_MAX;
        if (max_tokens && max_tokens - prefix < s.limit) s.limit = max_tokens - prefix;
    }
    else {
        s.limit = max_tokens ? max_tokens - specials : SIZE_MAX;
        if (tokenizer->json_truncation && tokenizer->json_max_length && tokenizer->json_max_length - specials < s.limit)
            s.limit = tokenizer->json_max_length - specials;
    }
    uform_status_t status = uform_status_ok_k;
    if (!length) status = encode_stretch(tokenizer, text, 0, true, &s);
    size_t done = 0; // bytes consumed into stretches and added tokens
    for (size_t i = 0; i < length && status == uform_status_ok_k && s.ids.count < s.limit;) {
        added_t const *token = tokenizer->added_first_byte[(unsigned char)text[i]] ? match_added(tokenizer, text, length, i)
                                                                                    : NULL;
        if (!token) {
            i++;
            if (i == length) status = encode_stretch(tokenizer, text + done, length - done, done == 0, &s);
            continue;
        }
        size_t start = i, stop = i + token->length, bytes;
        if (token->lstrip)
            while (start > done && uform_is_whitespace(code_point_before(text, start, &bytes))) start -= bytes;
        if (token->rstrip)
            while (stop < length && uform_is_whitespace(code_point_at(text, stop, &bytes))) stop += bytes;
        if (start > done) status = encode_stretch(tokenizer, text + done, start - done, done == 0, &s);
        if (status == uform_status_ok_k && s.ids.count < s.limit && !uform_ids_push(&s.ids, token->id)) status = OOM();
        /* As HF: matches are found in the raw text, then widened; the next is searched from this one's
         * own end (a token inside the whitespace an rstrip took still matches), the text resumes from
         * the widened end of the latest. */
        i = i + token->length, done = stop;
    }
    if (status == uform_status_ok_k) {
        size_t content = s.ids.count < s.limit ? s.ids.count : s.limit;
        size_t suffix = tokenizer->suffix_count, w = 0;
        if (tokenizer->processor_truncation && max_tokens) { // the suffix's ids past max_tokens are sliced off
            size_t const room = max_tokens - tokenizer->prefix_count - content;
            if (room < suffix) suffix = room;
        }
        for (size_t k = 0; k < tokenizer->prefix_count; k++, w++)
            if (w < capacity) ids[w] = tokenizer->prefix[k];
        for (size_t k = 0; k < content; k++, w++)
            if (w < capacity) ids[w] = s.ids.data[k];
        for (size_t k = 0; k < suffix; k++, w++)
            if (w < capacity) ids[w] = tokenizer->suffix[k];
        *count = w;
    }
    *scratch = s;
    scratch_release(scratch, owned);
    free(prompted);
    return status;
}
