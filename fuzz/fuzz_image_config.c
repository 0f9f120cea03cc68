/**
 *  @file   fuzz_image_config.c
 *  @brief  libFuzzer target for the image tower's reader: `config.json`'s `image_encoder` section
 *          (`uform_image_config_parse`) and the binding of `image_encoder.safetensors` into towers
 *          (image_model.c's `bind_all` and `tower_fill`).
 *
 *  The input is a `config.json` file's bytes, optionally followed by a NUL byte and a plan for the
 *  weights file. The config goes the model opening path's way (a NUL-terminated copy, as
 *  `uform_read_small_file` gives, then `uform_json_parse` and `uform_image_config_parse`). When it
 *  parses, the harness writes an `image_encoder.safetensors` in memory whose tensors have the shapes
 *  the parsed config implies (tagged values, no real model needed), bent by the plan, parses it with
 *  `uform_safetensors_parse` and binds it as `uform_image_model_load` does, then fills a tower in
 *  f32, bf16 and f16. Plan bytes (all optional; an empty plan is an honest F32 file):
 *
 *      [0] the file's dtype: 0 F32, 1 BF16, 2 F16, 3 I64 (known, not computable)
 *      [1] a lie about one config field the file's shapes are derived from (`lie_*` below)
 *      [2, 3], [4, 5], ...  (tensor, operation) pairs bending single tensors (`op_*` below)
 *
 *  Oracles, each an abort: the parsed config keeps the invariants the forward pass relies on;
 *  failures leave a message naming the file; the binder succeeds exactly when every tensor the
 *  config implies is present with that shape in a computable dtype (the harness judges that from
 *  its own table); every binding's source has the shape of its name; the filled tower has every
 *  tensor, inside the block, with the config's rows and columns, and holding its own name's values
 *  (each tensor of the file is filled with a small integer tag its name determines, exact in every
 *  dtype, so a tensor bound to another's field shows).
 *
 *  image_model.c is included, not linked, to reach its static binder: the replay build's object
 *  then defines all of that file's external symbols, so the library's copy is never pulled in; the
 *  libFuzzer build (UFORM_FUZZ_STANDALONE) stubs the few functions of the opening path that it
 *  does not link and never calls.
 */
#include "models/image_model.c"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(uint8_t const *data, size_t size);

#if defined(UFORM_FUZZ_STANDALONE)
/* The opening path's NUMA placement, replica memory and VRAM: not linked into the libFuzzer target. */
uform_status_t uform_placement_resolve(uform_ram_options_t const *ram, uform_placement_t *placement) {
    (void)ram, (void)placement;
    return uform_fail(uform_status_unsupported_k, "fuzz: no placement");
}
void uform_placement_free(uform_placement_t *placement) { (void)placement; }
uform_status_t uform_replica_memory_alloc(struct uform_model_s *model, struct uform_placement_t const *placement,
                                          size_t block_bytes, void **towers, size_t tower_size, size_t layers,
                                          size_t layer_size, char const *directory) {
    (void)model, (void)placement, (void)block_bytes, (void)towers, (void)tower_size, (void)layers, (void)layer_size;
    (void)directory;
    return uform_fail(uform_status_unsupported_k, "fuzz: no replicas");
}
uform_status_t uform_image_vram_open(struct uform_model_s *model, uform_vram_options_t const *vram) {
    (void)model, (void)vram;
    return uform_fail(uform_status_unsupported_k, "fuzz: no VRAM");
}
size_t uform_text_vram_copies(struct uform_model_s const *model) {
    (void)model;
    return 0;
}
#endif

/** Elements the whole weights file may hold; larger configs are parsed but not bound. */
#define FUZZ_MAX_ELEMENTS ((size_t)1 << 18)

#define FUZZ_CHECK(condition, ...)                                                                                     \
    do {                                                                                                               \
        if (!(condition)) {                                                                                            \
            fprintf(stderr, "fuzz_image_config: " __VA_ARGS__);                                                        \
            fputc('\n', stderr);                                                                                       \
            abort();                                                                                                   \
        }                                                                                                              \
    } while (0)

/** The extents the weights' shapes follow: the config's own, or a lie about one of them. */
typedef struct fuzz_extents_t {
    size_t d, p, grid, layers, reg, embed, f;
} fuzz_extents_t;

enum {
    lie_none_k, lie_dim_up_k, lie_dim_down_k, lie_patch_up_k, lie_patch_down_k, lie_grid_up_k, lie_grid_down_k,
    lie_layers_up_k, lie_layers_down_k, lie_reg_up_k, lie_reg_down_k, lie_embed_up_k, lie_embed_down_k,
    lie_intermediate_k, lies_count_k,
};

enum {
    op_drop_k, op_rank_up_k, op_rank_down_k, op_last_up_k, op_first_down_k, op_swap_k, op_i64_k, op_f16_k, op_bf16_k,
    op_rename_k, op_scalar_k, op_first_double_k, op_zero_k, ops_count_k,
};

typedef struct fuzz_tensor_t {
    char name[96];
    char const *dtype; /**< As written in the header. */
    size_t dtype_bytes;
    int computable;
    size_t rank, shape[UFORM_SAFETENSORS_MAX_RANK];
    int parameter; /**< Held in f32 by the tower. */
    int dropped;
    unsigned tag; /**< Every element's value, in [1, 248]: exact in F32, BF16 and F16. */
} fuzz_tensor_t;

/* Tags of the tower-level tensors; a layer's part k of layer l has 9 + (18 l + k) mod 240. */
enum {
    tag_patch_weight_k = 1, tag_patch_bias_k, tag_pos_embed_k, tag_cls_token_k, tag_reg_token_k, tag_norm_weight_k,
    tag_norm_bias_k, tag_projection_k,
};

static unsigned fuzz_layer_tag(size_t layer, size_t part) { return 9 + (unsigned)((18 * layer + part) % 240); }

static char const *const fuzz_layer_parts[18] = {
    "norm1.weight", "norm1.bias", "attn.query.weight", "attn.query.bias", "attn.key.weight", "attn.key.bias",
    "attn.value.weight", "attn.value.bias", "attn.out.weight", "attn.out.bias", "ls1.gamma", "norm2.weight",
    "norm2.bias", "mlp.hidden_layer.weight", "mlp.hidden_layer.bias", "mlp.output_layer.weight",
    "mlp.output_layer.bias", "ls2.gamma",
};

/** A layer part's shape: the harness's own table of what the `uform` package's ViT block holds. */
static size_t fuzz_layer_shape(fuzz_extents_t const *e, size_t part, size_t *shape) {
    switch (part) {
    case 2: case 4: case 6: case 8: shape[0] = e->d, shape[1] = e->d; return 2;
    case 13: shape[0] = e->f, shape[1] = e->d; return 2;
    case 14: shape[0] = e->f; return 1;
    case 15: shape[0] = e->d, shape[1] = e->f; return 2;
    default: shape[0] = e->d; return 1;
    }
}

static size_t fuzz_tensor(fuzz_tensor_t *list, size_t at, char const *name, size_t rank, size_t const *shape,
                          int parameter, unsigned tag) {
    fuzz_tensor_t *t = &list[at];
    memset(t, 0, sizeof(*t));
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->dtype = "F32", t->dtype_bytes = 4, t->computable = 1;
    t->rank = rank;
    memcpy(t->shape, shape, rank * sizeof(size_t));
    t->parameter = parameter;
    t->tag = tag;
    return at + 1;
}

/** Lists the tensors a tower of extents `e` holds, in the loader's order; `list` has room for
 *  `8 + 18 e->layers`. Returns how many. */
static size_t fuzz_tensors(fuzz_extents_t const *e, fuzz_tensor_t *list) {
    size_t n = 0, shape[4];
    shape[0] = e->d, shape[1] = 3, shape[2] = e->p, shape[3] = e->p;
    n = fuzz_tensor(list, n, "patch_embed.weight", 4, shape, 0, tag_patch_weight_k);
    shape[0] = e->d;
    n = fuzz_tensor(list, n, "patch_embed.bias", 1, shape, 1, tag_patch_bias_k);
    shape[0] = 1, shape[1] = e->grid * e->grid, shape[2] = e->d;
    n = fuzz_tensor(list, n, "pos_embed", 3, shape, 1, tag_pos_embed_k);
    shape[0] = 1, shape[1] = 1, shape[2] = e->d;
    n = fuzz_tensor(list, n, "cls_token", 3, shape, 1, tag_cls_token_k);
    if (e->reg) {
        shape[0] = 1, shape[1] = e->reg, shape[2] = e->d;
        n = fuzz_tensor(list, n, "reg_token", 3, shape, 1, tag_reg_token_k);
    }
    for (size_t layer = 0; layer < e->layers; ++layer)
        for (size_t part = 0; part < 18; ++part) {
            char name[96];
            snprintf(name, sizeof(name), "blocks.%zu.%s", layer, fuzz_layer_parts[part]);
            size_t const rank = fuzz_layer_shape(e, part, shape);
            n = fuzz_tensor(list, n, name, rank, shape, rank == 1, fuzz_layer_tag(layer, part));
        }
    shape[0] = e->d;
    n = fuzz_tensor(list, n, "norm.weight", 1, shape, 1, tag_norm_weight_k);
    n = fuzz_tensor(list, n, "norm.bias", 1, shape, 1, tag_norm_bias_k);
    shape[0] = e->embed, shape[1] = e->d;
    n = fuzz_tensor(list, n, "embedding_projection.weight", 2, shape, 0, tag_projection_k);
    return n;
}

/** Elements of `t`, saturating at SIZE_MAX. */
static size_t fuzz_elements(fuzz_tensor_t const *t) {
    size_t product = 1;
    for (size_t i = 0; i < t->rank; ++i) {
        if (!t->shape[i]) return 0;
        if (product > SIZE_MAX / t->shape[i]) product = SIZE_MAX;
        else product *= t->shape[i];
    }
    return product;
}

static void fuzz_set_dtype(fuzz_tensor_t *t, unsigned which) {
    static char const *const names[] = {"F32", "BF16", "F16", "I64"};
    static size_t const bytes[] = {4, 2, 2, 8};
    t->dtype = names[which & 3], t->dtype_bytes = bytes[which & 3], t->computable = (which & 3) != 3;
}

static void fuzz_bend(fuzz_tensor_t *t, unsigned op) {
    switch (op % ops_count_k) {
    case op_drop_k: t->dropped = 1; break;
    case op_rank_up_k:
        if (t->rank < UFORM_SAFETENSORS_MAX_RANK) t->shape[t->rank++] = 1;
        break;
    case op_rank_down_k:
        if (t->rank) --t->rank;
        break;
    case op_last_up_k:
        if (t->rank) ++t->shape[t->rank - 1];
        break;
    case op_first_down_k:
        if (t->rank && t->shape[0]) --t->shape[0];
        break;
    case op_swap_k:
        if (t->rank > 1) {
            size_t const first = t->shape[0];
            t->shape[0] = t->shape[t->rank - 1], t->shape[t->rank - 1] = first;
        }
        break;
    case op_i64_k: fuzz_set_dtype(t, 3); break;
    case op_f16_k: fuzz_set_dtype(t, 2); break;
    case op_bf16_k: fuzz_set_dtype(t, 1); break;
    case op_rename_k: strncat(t->name, "_", sizeof(t->name) - strlen(t->name) - 1); break;
    case op_scalar_k: t->rank = 0; break;
    case op_first_double_k:
        if (t->rank) t->shape[0] *= 2;
        break;
    default:
        if (t->rank) t->shape[t->rank - 1] = 0;
        break;
    }
}

static fuzz_extents_t fuzz_lie(uform_image_config_t const *c, unsigned lie) {
    fuzz_extents_t e = {c->dim, c->patch_size, c->grid, c->layers_count, c->reg_tokens, c->embedding_dimensions,
                        c->intermediate};
    switch (lie % lies_count_k) {
    case lie_dim_up_k: ++e.d, e.f = 4 * e.d; break;
    case lie_dim_down_k: --e.d, e.f = 4 * e.d; break; /* d >= 1: zero-width tensors when it was 1 */
    case lie_patch_up_k: ++e.p; break;
    case lie_patch_down_k: --e.p; break;
    case lie_grid_up_k: ++e.grid; break;
    case lie_grid_down_k: --e.grid; break;
    case lie_layers_up_k: ++e.layers; break;
    case lie_layers_down_k:
        if (e.layers) --e.layers;
        break;
    case lie_reg_up_k: ++e.reg; break;
    case lie_reg_down_k:
        if (e.reg) --e.reg;
        break;
    case lie_embed_up_k: ++e.embed; break;
    case lie_embed_down_k: --e.embed; break;
    case lie_intermediate_k: e.f = 3 * e.d; break;
    default: break;
    }
    return e;
}

/** Appends to a growing string; returns 0 when out of memory. */
static int fuzz_append(char **text, size_t *length, size_t *capacity, char const *piece) {
    size_t const more = strlen(piece);
    if (*length + more + 1 > *capacity) {
        size_t grown = *capacity ? *capacity : 4096;
        while (*length + more + 1 > grown) grown *= 2;
        char *bigger = realloc(*text, grown);
        if (!bigger) return 0;
        *text = bigger, *capacity = grown;
    }
    memcpy(*text + *length, piece, more + 1);
    *length += more;
    return 1;
}

/** Fills `elements` values of `t`'s dtype with its tag. */
static void fuzz_fill(fuzz_tensor_t const *t, uint8_t *data, size_t elements) {
    uint8_t one[8] = {0};
    float const value = (float)t->tag;
    if (t->dtype_bytes == 8) {
        int64_t const integer = (int64_t)t->tag;
        memcpy(one, &integer, 8);
    } else {
        uform_dtype_t const dtype = t->dtype_bytes == 4 ? uform_dtype_f32_k
                                    : strcmp(t->dtype, "BF16") == 0 ? uform_dtype_bf16_k : uform_dtype_f16_k;
        uform_convert(one, dtype, &value, uform_dtype_f32_k, 1);
    }
    for (size_t i = 0; i < elements; ++i) memcpy(data + i * t->dtype_bytes, one, t->dtype_bytes);
}

/** Writes the file: 8-byte header length, JSON header, tagged data. `*file` is freed by the caller. */
static int fuzz_write_file(fuzz_tensor_t const *list, size_t count, uint8_t **file, size_t *file_size) {
    char *header = NULL;
    size_t length = 0, capacity = 0, offset = 0;
    int ok = fuzz_append(&header, &length, &capacity, "{\"__metadata__\": {\"format\": \"pt\"}");
    for (size_t i = 0; ok && i < count; ++i) {
        fuzz_tensor_t const *t = &list[i];
        if (t->dropped) continue;
        size_t const bytes = fuzz_elements(t) * t->dtype_bytes;
        char piece[512];
        int used = snprintf(piece, sizeof(piece), ", \"%s\": {\"dtype\": \"%s\", \"shape\": [", t->name, t->dtype);
        for (size_t r = 0; r < t->rank; ++r)
            used += snprintf(piece + used, sizeof(piece) - (size_t)used, "%s%zu", r ? ", " : "", t->shape[r]);
        snprintf(piece + used, sizeof(piece) - (size_t)used, "], \"data_offsets\": [%zu, %zu]}", offset, offset + bytes);
        ok = fuzz_append(&header, &length, &capacity, piece);
        offset += bytes;
    }
    ok = ok && fuzz_append(&header, &length, &capacity, "}");
    if (ok) {
        *file_size = 8 + length + offset;
        *file = calloc(*file_size, 1);
        ok = *file != NULL;
    }
    if (ok) {
        for (int b = 0; b < 8; ++b) (*file)[b] = (uint8_t)((uint64_t)length >> (8 * b));
        memcpy(*file + 8, header, length);
        uint8_t *data = *file + 8 + length;
        for (size_t i = 0; i < count; ++i) {
            if (list[i].dropped) continue;
            size_t const elements = fuzz_elements(&list[i]);
            fuzz_fill(&list[i], data, elements);
            data += elements * list[i].dtype_bytes;
        }
    }
    free(header);
    return ok;
}

/** The config's invariants that the preprocessor and the forward pass take for granted. */
static void fuzz_check_config(uform_image_config_t const *c) {
    FUZZ_CHECK(c->dim >= 1 && c->dim <= UFORM_TEXT_MAX_EXTENT, "dim %zu", c->dim);
    FUZZ_CHECK(c->heads >= 1 && c->dim % c->heads == 0, "dim %zu heads %zu", c->dim, c->heads);
    FUZZ_CHECK(c->patch_size >= 1 && c->patch_size <= c->image_size && c->image_size <= UFORM_IMAGE_MAX_SIDE,
               "patch %zu image %zu", c->patch_size, c->image_size);
    FUZZ_CHECK(c->grid == c->image_size / c->patch_size && c->grid >= 1 && c->patches == c->grid * c->grid,
               "grid %zu patches %zu", c->grid, c->patches);
    FUZZ_CHECK(c->layers_count <= UFORM_TEXT_MAX_LAYERS, "layers %zu", c->layers_count);
    FUZZ_CHECK(c->reg_tokens <= UFORM_IMAGE_MAX_REG_TOKENS && c->sequence == 1 + c->reg_tokens + c->patches,
               "reg %zu sequence %zu", c->reg_tokens, c->sequence);
    FUZZ_CHECK(c->intermediate == 4 * c->dim, "intermediate %zu", c->intermediate);
    FUZZ_CHECK(c->embedding_dimensions >= 1 && c->embedding_dimensions <= UFORM_TEXT_MAX_EXTENT, "embedding %zu",
               c->embedding_dimensions);
    FUZZ_CHECK(c->pooling == uform_pooling_cls_k || c->pooling == uform_pooling_mean_k, "pooling %d", (int)c->pooling);
    FUZZ_CHECK(c->layer_norm_epsilon > 0, "epsilon %g", c->layer_norm_epsilon);
    for (int i = 0; i < 3; ++i) {
        FUZZ_CHECK(isfinite(c->mean[i]) && c->std[i] > 0 && isfinite(c->std[i]), "mean %g std %g", c->mean[i], c->std[i]);
        float const low = (0.0f - c->mean[i]) / c->std[i], high = (255.0f - c->mean[i]) / c->std[i];
        FUZZ_CHECK(isfinite(low) && isfinite(high), "normalised pixels %g .. %g", low, high);
    }
    for (size_t i = 0; i < 8; ++i) {
        if (!c->matryoshka[i]) {
            for (size_t j = i; j < 8; ++j) FUZZ_CHECK(!c->matryoshka[j], "matryoshka not zero-padded");
            break;
        }
        FUZZ_CHECK(c->matryoshka[i] < c->embedding_dimensions && (!i || c->matryoshka[i] > c->matryoshka[i - 1]),
                   "matryoshka[%zu] %zu", i, c->matryoshka[i]);
    }
}

static void fuzz_check_message(char const *label) {
    char const *message = uform_error_message();
    FUZZ_CHECK(message && strstr(message, label), "failure message '%s' does not name %s", message ? message : "",
               label);
}

/** Checks one filled tensor against what the config says it must be. */
static void fuzz_check_tensor(uform_tensor_t const *t, char const *what, size_t layer, unsigned tag, size_t rows,
                              size_t cols, uform_dtype_t dtype, uint8_t const *block, size_t bytes) {
    FUZZ_CHECK(t->data, "%s (layer %zu) was not filled", what, layer);
    FUZZ_CHECK(t->rows == rows && t->cols == cols && t->dtype == dtype, "%s (layer %zu) is [%zu][%zu] dtype %d, not [%zu][%zu] %d",
               what, layer, t->rows, t->cols, (int)t->dtype, rows, cols, (int)dtype);
    uint8_t const *begin = (uint8_t const *)t->data;
    size_t const size = rows * cols * uform_dtype_bytes(dtype);
    FUZZ_CHECK(begin >= block && begin <= block + bytes && size <= (size_t)(block + bytes - begin),
               "%s (layer %zu) lies outside the block", what, layer);
    size_t const element = uform_dtype_bytes(dtype);
    float first = 0, last = 0;
    uform_convert(&first, uform_dtype_f32_k, begin, dtype, 1);
    uform_convert(&last, uform_dtype_f32_k, begin + size - element, dtype, 1);
    FUZZ_CHECK(first == (float)tag && last == (float)tag, "%s (layer %zu) holds %g .. %g, not its tensor's %u", what,
               layer, first, last, tag);
}

static void fuzz_check_tower(uform_image_config_t const *c, uform_image_tower_t const *tower, uform_dtype_t dtype,
                             uint8_t const *block, size_t bytes) {
    size_t const d = c->dim, f = c->intermediate, p = c->patch_size;
    uform_dtype_t const f32 = uform_dtype_f32_k;
    FUZZ_CHECK(tower->weights_dtype == dtype && tower->config.dim == d, "tower header");
    fuzz_check_tensor(&tower->patch_weight, "patch_weight", SIZE_MAX, tag_patch_weight_k, d, 3 * p * p, dtype, block,
                      bytes);
    fuzz_check_tensor(&tower->patch_bias, "patch_bias", SIZE_MAX, tag_patch_bias_k, 1, d, f32, block, bytes);
    fuzz_check_tensor(&tower->pos_embed, "pos_embed", SIZE_MAX, tag_pos_embed_k, c->patches, d, f32, block, bytes);
    fuzz_check_tensor(&tower->cls_token, "cls_token", SIZE_MAX, tag_cls_token_k, 1, d, f32, block, bytes);
    if (c->reg_tokens)
        fuzz_check_tensor(&tower->reg_token, "reg_token", SIZE_MAX, tag_reg_token_k, c->reg_tokens, d, f32, block, bytes);
    else FUZZ_CHECK(!tower->reg_token.data, "reg_token without register tokens");
    fuzz_check_tensor(&tower->norm_weight, "norm_weight", SIZE_MAX, tag_norm_weight_k, 1, d, f32, block, bytes);
    fuzz_check_tensor(&tower->norm_bias, "norm_bias", SIZE_MAX, tag_norm_bias_k, 1, d, f32, block, bytes);
    fuzz_check_tensor(&tower->projection, "projection", SIZE_MAX, tag_projection_k, c->embedding_dimensions, d, dtype,
                      block, bytes);
    for (size_t l = 0; l < c->layers_count; ++l) {
        uform_image_layer_t const *y = &tower->layers[l];
        /* In fuzz_layer_parts' order. */
        uform_tensor_t const *const parts[18] = {
            &y->norm1_weight, &y->norm1_bias, &y->query_weight, &y->query_bias, &y->key_weight, &y->key_bias,
            &y->value_weight, &y->value_bias, &y->out_weight, &y->out_bias, &y->ls1, &y->norm2_weight,
            &y->norm2_bias, &y->hidden_weight, &y->hidden_bias, &y->output_weight, &y->output_bias, &y->ls2,
        };
        fuzz_extents_t const e = {.d = d, .f = f};
        for (size_t k = 0; k < 18; ++k) {
            size_t shape[2];
            size_t const rank = fuzz_layer_shape(&e, k, shape);
            fuzz_check_tensor(parts[k], fuzz_layer_parts[k], l, fuzz_layer_tag(l, k), rank == 2 ? shape[0] : 1,
                              rank == 2 ? shape[1] : shape[0], rank == 2 ? dtype : f32, block, bytes);
        }
    }
}

/** Does `list` (the file) hold every tensor of `expected` by name, shape and a computable dtype? */
static int fuzz_file_matches(fuzz_tensor_t const *expected, size_t expected_count, fuzz_tensor_t const *list,
                             size_t count) {
    for (size_t i = 0; i < expected_count; ++i) {
        int found = 0;
        for (size_t j = 0; j < count && !found; ++j) {
            fuzz_tensor_t const *t = &list[j];
            if (t->dropped || strcmp(t->name, expected[i].name) != 0) continue;
            found = t->computable && t->rank == expected[i].rank &&
                    memcmp(t->shape, expected[i].shape, t->rank * sizeof(size_t)) == 0;
            if (!found) return 0;
        }
        if (!found) return 0;
    }
    return 1;
}

static void fuzz_bind(uform_image_config_t const *config, uint8_t const *plan, size_t plan_size) {
    fuzz_extents_t const truth = fuzz_lie(config, lie_none_k);
    fuzz_extents_t const shapes = fuzz_lie(config, plan_size > 1 ? plan[1] : lie_none_k);
    size_t const expected_count = 8 + 18 * truth.layers, count = 8 + 18 * shapes.layers;
    fuzz_tensor_t *expected = calloc(expected_count, sizeof(fuzz_tensor_t));
    fuzz_tensor_t *list = calloc(count, sizeof(fuzz_tensor_t));
    uint8_t *file = NULL;
    size_t file_size = 0;
    uform_safetensors_t index = {0};
    image_binder_t binder = {0};
    if (!expected || !list) goto done;
    size_t const listed_expected = fuzz_tensors(&truth, expected);
    size_t const listed = fuzz_tensors(&shapes, list);
    FUZZ_CHECK(listed_expected <= expected_count && listed <= count, "tensor table overflow");
    for (size_t i = 0; i < listed; ++i) fuzz_set_dtype(&list[i], plan_size ? plan[0] : 0);
    for (size_t i = 2; i + 1 < plan_size; i += 2) fuzz_bend(&list[plan[i] % listed], plan[i + 1]);
    size_t total = 0;
    for (size_t i = 0; i < listed; ++i) {
        size_t const elements = fuzz_elements(&list[i]);
        if (elements > FUZZ_MAX_ELEMENTS || (total += elements) > FUZZ_MAX_ELEMENTS) goto done; /* too large to bind here */
        /* A zero extent lets another grow without bound: the reader rightly refuses beyond 2^53 (JSON's exact integers). */
        for (size_t r = 0; r < list[i].rank; ++r)
            if (list[i].shape[r] > ((size_t)1 << 53)) goto done;
    }
    if (!fuzz_write_file(list, listed, &file, &file_size)) goto done;
    uform_status_t status = uform_safetensors_parse("image_encoder.safetensors", file, file_size, &index);
    FUZZ_CHECK(status == uform_status_ok_k, "the harness's own file does not parse: %s", uform_error_message());

    /* As uform_image_model_load. */
    size_t const capacity = 8 + 18 * config->layers_count;
    binder.index = &index;
    binder.bindings = calloc(capacity, sizeof(uform_binding_t));
    if (!binder.bindings) goto done;
    status = bind_all(&binder, config);
    int const should_bind = fuzz_file_matches(expected, listed_expected, list, listed);
    FUZZ_CHECK((status == uform_status_ok_k) == should_bind, "the binder says %s, the harness expected %s (%s)",
               uform_status_name(status), should_bind ? "OK" : "a failure",
               status == uform_status_ok_k ? "" : uform_error_message());
    if (status != uform_status_ok_k) {
        fuzz_check_message("image_encoder.safetensors");
        goto done;
    }
    FUZZ_CHECK(binder.count == listed_expected && binder.count <= capacity, "%zu bindings, %zu expected", binder.count,
               listed_expected);
    /* Each binding's source has its own name's shape, and the rows and columns hold all of it. */
    for (size_t i = 0; i < binder.count; ++i) {
        uform_binding_t const *b = &binder.bindings[i];
        fuzz_tensor_t const *e = &expected[i];
        FUZZ_CHECK(strcmp(b->source->name, e->name) == 0 && b->source->rank == e->rank &&
                       memcmp(b->source->shape, e->shape, e->rank * sizeof(size_t)) == 0,
                   "binding %zu is '%s', expected '%s'", i, b->source->name, e->name);
        FUZZ_CHECK(b->rows * b->cols == b->source->elements && b->parameter == e->parameter,
                   "binding '%s' is [%zu][%zu] for %zu elements", e->name, b->rows, b->cols, b->source->elements);
    }
    uform_dtype_t const dtypes[] = {uform_dtype_f32_k, uform_dtype_bf16_k, uform_dtype_f16_k};
    for (size_t k = 0; k < 3; ++k) {
        size_t const bytes = uform_replica_bytes(binder.bindings, binder.count, dtypes[k]);
        uint8_t *block = aligned_alloc(64, bytes ? bytes : 64);
        uform_image_layer_t *layers = calloc(config->layers_count ? config->layers_count : 1, sizeof(uform_image_layer_t));
        uform_image_tower_t tower;
        if (block && layers) {
            tower_fill(config, binder.bindings, binder.count, dtypes[k], block, layers, &tower);
            fuzz_check_tower(config, &tower, dtypes[k], block, bytes);
        }
        free(block), free(layers);
    }
done:
    free(binder.bindings);
    uform_safetensors_close(&index);
    free(file);
    free(list);
    free(expected);
}

int LLVMFuzzerTestOneInput(uint8_t const *data, size_t size) {
    uint8_t const *split = size ? memchr(data, '\0', size) : NULL;
    size_t const length = split ? (size_t)(split - data) : size;
    /* uform_read_small_file hands the parser a NUL-terminated copy. */
    char *text = malloc(length + 1);
    if (!text) return 0;
    if (length) memcpy(text, data, length);
    text[length] = '\0';
    void *root = NULL;
    uform_image_config_t config;
    uform_status_t status = uform_json_parse("config.json", text, length, &root);
    if (status == uform_status_ok_k) status = uform_image_config_parse("config.json", root, &config);
    if (status != uform_status_ok_k) fuzz_check_message("config.json");
    uform_json_free(root);
    free(text);
    if (status != uform_status_ok_k) return 0;
    fuzz_check_config(&config);
    fuzz_bind(&config, split ? split + 1 : NULL, split ? size - length - 1 : 0);
    return 0;
}
