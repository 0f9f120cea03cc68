/**
 *  @file   image_model.c
 *  @brief  The image tower of a UForm3 model directory: `config.json`'s `image_encoder` section (the
 *          fields of the `uform` package's `ImageEncoder` and its `ImageProcessor`'s normalisation)
 *          and `image_encoder.safetensors`, read into one replica per memory domain in the dtype
 *          asked for, with the text loader's validation and messages.
 */
#include "kernels/kernels.h" // `uform_gemm_pin`
#include "models/config.h"
#include "models/convert.h"
#include "models/image_tower.h"
#include "models/image_vram.h"
#include "models/model.h"
#include "models/safetensors.h"
#include "models/text_vram.h"
#include "internal.h"

#include <cjson/cJSON.h>

#include <float.h>  // `FLT_MIN`
#include <math.h>   // `isfinite`, `floor`
#include <stddef.h> // `offsetof`
#include <stdio.h>  // `snprintf`
#include <stdlib.h> // `calloc`, `free`
#include <string.h> // `strcmp`, `memset`


/* ---- Config ---- */

static uform_status_t json_extent(char const *label, cJSON const *object, char const *key, int required, size_t fallback,
                                  size_t low, size_t high, size_t *value) {
    cJSON const *item = cJSON_GetObjectItemCaseSensitive(object, key);
    if (!item || cJSON_IsNull(item)) {
        if (required) return uform_fail(uform_status_corrupt_file_k, "%s: missing key 'image_encoder.%s'", label, key);
        *value = fallback;
        return uform_status_ok_k;
    }
    double const number = cJSON_IsNumber(item) ? item->valuedouble : NAN;
    if (!isfinite(number) || floor(number) != number || number < (double)low || number > (double)high)
        return uform_fail(uform_status_corrupt_file_k, "%s: 'image_encoder.%s' must be an integer in [%zu, %zu]", label,
                          key, low, high);
    *value = (size_t)number;
    return uform_status_ok_k;
}

static uform_status_t json_triple(char const *label, cJSON const *object, char const *key, int positive, float *values) {
    cJSON const *list = cJSON_GetObjectItemCaseSensitive(object, key);
    if (!list) return uform_fail(uform_status_corrupt_file_k, "%s: missing key 'image_encoder.%s'", label, key);
    if (!cJSON_IsArray(list) || cJSON_GetArraySize(list) != 3)
        return uform_fail(uform_status_corrupt_file_k, "%s: 'image_encoder.%s' must be a list of 3 numbers", label, key);
    for (int i = 0; i < 3; ++i) {
        cJSON const *item = cJSON_GetArrayItem(list, i);
        double const number = cJSON_IsNumber(item) ? item->valuedouble : NAN;
        /* Bounded so that (x - mean) / deviation stays finite in float32 for every 8-bit x. */
        if (!cJSON_IsNumber(item))
            return uform_fail(uform_status_corrupt_file_k, "%s: 'image_encoder.%s' must hold 3 numbers; item %d is not one",
                              label, key, i);
        if (!isfinite(number) || (positive ? !(number >= 1e-6 && number <= 1e6) : !(fabs(number) <= 1e6)))
            return uform_fail(uform_status_corrupt_file_k, "%s: 'image_encoder.%s' must hold 3 %snumbers, not %g", label,
                              key, positive ? "positive " : "", number);
        values[i] = (float)number; /* torchvision's Normalize holds them as float32 tensors */
    }
    return uform_status_ok_k;
}

uform_status_t uform_image_config_parse(char const *label, void const *root_, uform_image_config_t *config) {
    cJSON const *root = (cJSON const *)root_;
    memset(config, 0, sizeof(*config));
    cJSON const *image = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "image_encoder") : NULL;
    if (!cJSON_IsObject(root))
        return uform_fail(uform_status_corrupt_file_k, "%s: not a JSON object (a UForm3 config.json is one)", label);
    if (!image) /* a readable config of a model without an image tower: a text-only model */
        return uform_fail(uform_status_unsupported_k,
                          "%s: missing key 'image_encoder': the model has no image tower (a text-only model?)", label);
    if (!cJSON_IsObject(image)) return uform_fail(uform_status_corrupt_file_k, "%s: 'image_encoder' must be an object", label);
    uform_status_t status;
#define TRY(expression)                                                                                                \
    do {                                                                                                               \
        if ((status = (expression)) != uform_status_ok_k) return status;                                               \
    } while (0)
    TRY(json_extent(label, image, "dim", 1, 0, 1, UFORM_TEXT_MAX_EXTENT, &config->dim));
    TRY(json_extent(label, image, "patch_size", 1, 0, 1, UFORM_IMAGE_MAX_SIDE, &config->patch_size));
    TRY(json_extent(label, image, "image_size", 1, 0, 1, UFORM_IMAGE_MAX_SIDE, &config->image_size));
    TRY(json_extent(label, image, "num_layers", 1, 0, 0, UFORM_TEXT_MAX_LAYERS, &config->layers_count));
    TRY(json_extent(label, image, "num_heads", 1, 0, 1, UFORM_TEXT_MAX_EXTENT, &config->heads));
    TRY(json_extent(label, image, "embedding_dim", 1, 0, 1, UFORM_TEXT_MAX_EXTENT, &config->embedding_dimensions));
    TRY(json_extent(label, image, "num_reg_tokens", 0, 0, 0, UFORM_IMAGE_MAX_REG_TOKENS, &config->reg_tokens));
    cJSON const *pooling = cJSON_GetObjectItemCaseSensitive(image, "pooling");
    if (!pooling) return uform_fail(uform_status_corrupt_file_k, "%s: missing key 'image_encoder.pooling'", label);
    if (!cJSON_IsString(pooling) || !pooling->valuestring)
        return uform_fail(uform_status_corrupt_file_k, "%s: 'image_encoder.pooling' must be a string", label);
    if (strcmp(pooling->valuestring, "cls") == 0) config->pooling = uform_pooling_cls_k;
    else if (strcmp(pooling->valuestring, "mean") == 0) config->pooling = uform_pooling_mean_k;
    else
        return uform_fail(uform_status_unsupported_k, "%s: 'image_encoder.pooling' is '%.64s'; only 'cls' and 'mean' are supported",
                          label, pooling->valuestring);
    if (config->dim % config->heads)
        return uform_fail(uform_status_corrupt_file_k, "%s: 'image_encoder.dim' %zu is not a multiple of 'image_encoder.num_heads' %zu",
                          label, config->dim, config->heads);
    if (config->patch_size > config->image_size)
        return uform_fail(uform_status_corrupt_file_k, "%s: 'image_encoder.patch_size' %zu is larger than 'image_encoder.image_size' %zu",
                          label, config->patch_size, config->image_size);
    TRY(json_triple(label, image, "normalization_means", 0, config->mean));
    TRY(json_triple(label, image, "normalization_deviations", 1, config->std));
    /* Matryoshka widths: the section's own, else the root's; ascending, unique, narrower. */
    cJSON const *list = cJSON_GetObjectItemCaseSensitive(image, "matryoshka_dims");
    char const *section = "image_encoder."; /* which key an error names */
    if (!list) list = cJSON_GetObjectItemCaseSensitive(root, "matryoshka_dims"), section = "";
    TRY(uform_config_matryoshka_widths(label, section, list, config->embedding_dimensions, config->matryoshka));
#undef TRY
    config->grid = config->image_size / config->patch_size;
    config->patches = config->grid * config->grid;
    config->sequence = 1 + config->reg_tokens + config->patches;
    if (config->sequence > UFORM_IMAGE_MAX_SEQUENCE)
        return uform_fail(uform_status_unsupported_k, "%s: 'image_encoder.image_size' %zu in patches of %zu pixels (and "
                          "%zu register tokens) makes %zu tokens, more than the %zu this engine's attention holds",
                          label, config->image_size, config->patch_size, config->reg_tokens, config->sequence,
                          UFORM_IMAGE_MAX_SEQUENCE);
    config->intermediate = 4 * config->dim; /* the package's MLP expands by 4 */
    /* The package's ImageEncoder fixes 1e-6 and its config names no epsilon; `layer_norm_eps` (the
       Hugging Face name, which BERT configs use) overrides it, in (0, 1) as there, and no smaller
       than float32's smallest normal: the passes add it in float32, where 0 would divide by zero. */
    config->layer_norm_epsilon = 1e-6;
    cJSON const *epsilon = cJSON_GetObjectItemCaseSensitive(image, "layer_norm_eps");
    if (epsilon && !cJSON_IsNull(epsilon)) {
        if (!cJSON_IsNumber(epsilon))
            return uform_fail(uform_status_corrupt_file_k, "%s: 'image_encoder.layer_norm_eps' must be a number in (0, 1)",
                              label);
        double const number = epsilon->valuedouble;
        if (!isfinite(number) || number <= 0 || number >= 1 || (float)number < FLT_MIN)
            return uform_fail(uform_status_corrupt_file_k,
                              "%s: 'image_encoder.layer_norm_eps' must be a number in (0, 1) that float32 holds as a "
                              "normal number, not %g",
                              label, number);
        config->layer_norm_epsilon = number;
    }
    return uform_status_ok_k;
}

/* ---- Binding ---- */

typedef struct image_binder_t {
    uform_safetensors_t const *index;
    uform_binding_t *bindings;
    size_t count;
} image_binder_t;

/** Binds `name` whose shape must be `shape[0 .. rank)`, held as [rows][cols]. */
static uform_status_t bind(image_binder_t *binder, char const *name, size_t rank, size_t const *shape, size_t rows,
                           size_t cols, int parameter, size_t layer, size_t field) {
    uform_safetensor_t const *tensor = NULL;
    uform_status_t const status = uform_safetensors_expect(binder->index, name, rank, shape, &tensor);
    if (status != uform_status_ok_k) return status;
    binder->bindings[binder->count++] =
        (uform_binding_t){.source = tensor, .rows = rows, .cols = cols, .parameter = parameter, .layer = layer, .field = field};
    return uform_status_ok_k;
}

#define TOWER_FIELD(member) offsetof(uform_image_tower_t, member)
#define LAYER_FIELD(member) offsetof(uform_image_layer_t, member)

static uform_status_t bind_all(image_binder_t *b, uform_image_config_t const *c) {
    size_t const d = c->dim, f = c->intermediate, p = c->patch_size;
    uform_status_t status;
#define BIND(name, rank, rows, cols, parameter, layer, field, ...)                                                     \
    do {                                                                                                               \
        size_t const shape_[] = {__VA_ARGS__};                                                                         \
        if ((status = bind(b, name, rank, shape_, rows, cols, parameter, layer, field)) != uform_status_ok_k) return status; \
    } while (0)
    BIND("patch_embed.weight", 4, d, 3 * p * p, 0, SIZE_MAX, TOWER_FIELD(patch_weight), d, 3, p, p);
    BIND("patch_embed.bias", 1, 1, d, 1, SIZE_MAX, TOWER_FIELD(patch_bias), d);
    BIND("pos_embed", 3, c->patches, d, 1, SIZE_MAX, TOWER_FIELD(pos_embed), 1, c->patches, d);
    BIND("cls_token", 3, 1, d, 1, SIZE_MAX, TOWER_FIELD(cls_token), 1, 1, d);
    if (c->reg_tokens) BIND("reg_token", 3, c->reg_tokens, d, 1, SIZE_MAX, TOWER_FIELD(reg_token), 1, c->reg_tokens, d);
    for (size_t layer = 0; layer < c->layers_count; ++layer) {
        struct {
            char const *name;
            size_t rows, cols;
            int parameter;
            size_t field;
        } const parts[] = {
            {"norm1.weight", 0, d, 1, LAYER_FIELD(norm1_weight)},
            {"norm1.bias", 0, d, 1, LAYER_FIELD(norm1_bias)},
            {"attn.query.weight", d, d, 0, LAYER_FIELD(query_weight)},
            {"attn.query.bias", 0, d, 1, LAYER_FIELD(query_bias)},
            {"attn.key.weight", d, d, 0, LAYER_FIELD(key_weight)},
            {"attn.key.bias", 0, d, 1, LAYER_FIELD(key_bias)},
            {"attn.value.weight", d, d, 0, LAYER_FIELD(value_weight)},
            {"attn.value.bias", 0, d, 1, LAYER_FIELD(value_bias)},
            {"attn.out.weight", d, d, 0, LAYER_FIELD(out_weight)},
            {"attn.out.bias", 0, d, 1, LAYER_FIELD(out_bias)},
            {"ls1.gamma", 0, d, 1, LAYER_FIELD(ls1)},
            {"norm2.weight", 0, d, 1, LAYER_FIELD(norm2_weight)},
            {"norm2.bias", 0, d, 1, LAYER_FIELD(norm2_bias)},
            {"mlp.hidden_layer.weight", f, d, 0, LAYER_FIELD(hidden_weight)},
            {"mlp.hidden_layer.bias", 0, f, 1, LAYER_FIELD(hidden_bias)},
            {"mlp.output_layer.weight", d, f, 0, LAYER_FIELD(output_weight)},
            {"mlp.output_layer.bias", 0, d, 1, LAYER_FIELD(output_bias)},
            {"ls2.gamma", 0, d, 1, LAYER_FIELD(ls2)},
        };
        for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); ++i) {
            char name[96];
            snprintf(name, sizeof(name), "blocks.%zu.%s", layer, parts[i].name);
            if (parts[i].rows) BIND(name, 2, parts[i].rows, parts[i].cols, 0, layer, parts[i].field, parts[i].rows, parts[i].cols);
            else BIND(name, 1, 1, parts[i].cols, 1, layer, parts[i].field, parts[i].cols);
        }
    }
    BIND("norm.weight", 1, 1, d, 1, SIZE_MAX, TOWER_FIELD(norm_weight), d);
    BIND("norm.bias", 1, 1, d, 1, SIZE_MAX, TOWER_FIELD(norm_bias), d);
    BIND("embedding_projection.weight", 2, c->embedding_dimensions, d, 0, SIZE_MAX, TOWER_FIELD(projection),
         c->embedding_dimensions, d);
#undef BIND
    return uform_status_ok_k;
}

static void tower_fill(uform_image_config_t const *config, uform_binding_t const *bindings, size_t count,
                       uform_dtype_t dtype, void *block, uform_image_layer_t *layers, uform_image_tower_t *tower) {
    memset(tower, 0, sizeof(*tower));
    memset(layers, 0, (config->layers_count ? config->layers_count : 1) * sizeof(uform_image_layer_t));
    tower->config = *config;
    tower->weights_dtype = dtype;
    tower->layers = layers;
    uform_bindings_place(bindings, count, dtype, block, tower, layers, sizeof(uform_image_layer_t));
}

/* ---- Open ---- */

void uform_image_model_release(struct uform_model_s *model) {
    free(model->image_replicas); // the replicas' memory is model.c's (`uform_replica_memory_free`)
    model->image_replicas = NULL;
}

uform_status_t uform_image_model_load(struct uform_model_s *model, uform_model_options_t const *options) {
    char const *directory = options->path;
    uform_dtype_t const dtype = options->weights_dtype;
    uform_placement_t placement = {0};
    uform_safetensors_t index = {0};
    image_binder_t binder = {0};
    uform_image_config_t config;
    void *root = NULL;
    char *text = NULL;
    size_t length = 0;
    char path[4096];
    uform_status_t status;
#define CHECK(expression)                                                                                              \
    do {                                                                                                               \
        if ((status = (expression)) != uform_status_ok_k) goto done;                                                   \
    } while (0)
    CHECK(uform_placement_resolve(options->residency == uform_residency_vram_k ? NULL : options->ram, &placement));
    /* VRAM: one host tower (uploaded, then kept for the shapes). */
    if (options->residency == uform_residency_vram_k && placement.domains_count > 1) placement.domains_count = 1;
    int written = snprintf(path, sizeof(path), "%s/config.json", directory);
    if (written < 0 || (size_t)written >= sizeof(path)) {
        status = uform_fail(uform_status_invalid_argument_k, "model path is too long: %.64s...", directory);
        goto done;
    }
    CHECK(uform_read_small_file(path, &text, &length, NULL));
    CHECK(uform_json_parse(path, text, length, &root));
    CHECK(uform_image_config_parse(path, root, &config));
    written = snprintf(path, sizeof(path), "%s/image_encoder.safetensors", directory);
    if (written < 0 || (size_t)written >= sizeof(path)) { // longer than config.json's name, which fitted
        status = uform_fail(uform_status_invalid_argument_k, "model path is too long: %.64s...", directory);
        goto done;
    }
    CHECK(uform_safetensors_open(path, &index));
    size_t const capacity = 8 + 18 * config.layers_count;
    binder.index = &index;
    binder.bindings = calloc(capacity, sizeof(uform_binding_t));
    if (!binder.bindings) {
        status = uform_fail(uform_status_out_of_memory_k, "out of memory binding %zu tensors", capacity);
        goto done;
    }
    CHECK(bind_all(&binder, &config));

    void *towers = NULL;
    status = uform_replica_memory_alloc(model, &placement, uform_replica_bytes(binder.bindings, binder.count, dtype), &towers, sizeof(uform_image_tower_t),
                                        config.layers_count, sizeof(uform_image_layer_t), directory);
    model->image_replicas = towers; // freed with the model, even after a failure
    if (status != uform_status_ok_k) goto done;
    for (size_t i = 0; i < model->replicas_count; ++i)
        tower_fill(&config, binder.bindings, binder.count, dtype, model->memory.blocks[i], model->memory.layers[i],
                   &model->image_replicas[i]);
    CHECK(uform_bindings_check(path, binder.bindings, binder.count, dtype, model->memory.blocks[0]));

    size_t parameters = 0;
    for (size_t i = 0; i < binder.count; ++i) parameters += binder.bindings[i].rows * binder.bindings[i].cols;
    uform_model_description_t *description = &model->description;
    description->modality = uform_modality_image_k;
    description->residency = model->residency;
    description->weights_dtype = dtype;
    description->dimensions = config.embedding_dimensions;
    memcpy(description->matryoshka_dimensions, config.matryoshka, sizeof(config.matryoshka));
    description->context = 0;
    description->image_size = config.image_size;
    description->hidden = config.dim;
    description->tokens = config.sequence;
    description->layers = config.layers_count;
    description->parameters = parameters;
    description->replicas = model->replicas_count;
    if (options->residency == uform_residency_vram_k) {
        CHECK(uform_image_vram_open(model, options->vram));
        description->replicas = uform_text_vram_copies(model);
    }
#undef CHECK
done:
    free(binder.bindings);
    uform_safetensors_close(&index);
    uform_placement_free(&placement);
    uform_json_free(root);
    free(text);
    return status;
}

uform_image_tower_t const *uform_model_image_replica(struct uform_model_s const *model, int32_t node) {
    if (!model || !model->image_replicas || !model->replicas_count) return NULL;
    for (size_t i = 0; i < model->replicas_count; ++i)
        if (model->replica_nodes[i] == node) return &model->image_replicas[i];
    return &model->image_replicas[0];
}
