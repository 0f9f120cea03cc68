/**
 *  @file   strmap.c
 *  @brief  String maps (open addressing over one blob of strings), their hash, and the growable id and
 *          code-point buffers the tokenizers share.
 */
#include "text/text.h"

#include <stdlib.h>
#include <string.h>

uint64_t uform_hash_bytes(void const *data, size_t length) {
    unsigned char const *p = data;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (length * 0xD6E8FEB86659FD93ull);
    while (length >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
        h ^= h >> 31;
        p += 8, length -= 8;
    }
    if (length) {
        uint64_t w = 0;
        memcpy(&w, p, length);
        h = (h ^ w) * 0x94D049BB133111EBull;
        h ^= h >> 29;
    }
    h *= 0xBF58476D1CE4E5B9ull;
    return h ^ (h >> 32);
}

uform_status_t uform_strmap_init(uform_strmap_t *map, size_t expected, char const *blob) {
    size_t slots = 16;
    while (slots < expected * 2) slots <<= 1;
    map->slots = calloc(slots, sizeof(uform_strmap_slot_t));
    if (!map->slots) return uform_fail(uform_status_out_of_memory_k, "tokenizer: out of memory for a vocabulary");
    map->mask = slots - 1;
    map->count = 0;
    map->blob = blob;
    return uform_status_ok_k;
}

void uform_strmap_put(uform_strmap_t *map, uint32_t offset, uint32_t length, int32_t id) {
    uint64_t h = uform_hash_bytes(map->blob + offset, length);
    uint32_t tag = (uint32_t)(h >> 32) | 1u;
    for (size_t i = (size_t)h & map->mask;; i = (i + 1) & map->mask) {
        uform_strmap_slot_t *slot = &map->slots[i];
        if (!slot->hash) {
            *slot = (uform_strmap_slot_t){.hash = tag, .id = id, .offset = offset, .length = length};
            map->count++;
            return;
        }
        if (slot->hash == tag && slot->length == length && !memcmp(map->blob + slot->offset, map->blob + offset, length)) {
            slot->id = id;
            return;
        }
    }
}

int32_t uform_strmap_get(uform_strmap_t const *map, char const *key, size_t length) {
    uint64_t h = uform_hash_bytes(key, length);
    uint32_t tag = (uint32_t)(h >> 32) | 1u;
    for (size_t i = (size_t)h & map->mask;; i = (i + 1) & map->mask) {
        uform_strmap_slot_t const *slot = &map->slots[i];
        if (!slot->hash) return -1;
        if (slot->hash == tag && slot->length == length && !memcmp(map->blob + slot->offset, key, length)) return slot->id;
    }
}

void uform_strmap_free(uform_strmap_t *map) {
    free(map->slots);
    map->slots = NULL;
}

bool uform_ids_grow(uform_ids_t *ids, size_t at_least) {
    size_t capacity = ids->capacity ? ids->capacity * 2 : 256;
    while (capacity < at_least) capacity *= 2;
    int32_t *data = realloc(ids->data, capacity * sizeof(int32_t));
    if (!data) return false;
    ids->data = data, ids->capacity = capacity;
    return true;
}

bool uform_scratch_reserve_u32(uint32_t **buffer, size_t *capacity, size_t count) {
    if (*capacity >= count) return true;
    size_t grown = count < 64 ? 64 : count + count / 2;
    uint32_t *data = realloc(*buffer, grown * sizeof(uint32_t));
    if (!data) return false;
    *buffer = data, *capacity = grown;
    return true;
}

void uform_scratch_free(uform_scratch_t *scratch) {
    free(scratch->a), free(scratch->b), free(scratch->bytes);
    free(scratch->scores), free(scratch->starts), free(scratch->pieces);
    free(scratch->ids.data);
}
