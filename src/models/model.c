/**
 *  @file   model.c
 *  @brief  `uform_model_open` and friends: a model directory's configuration and safetensors read
 *          into one text tower per memory domain, in the dtype asked for, plus its tokenizer.
 *
 *  The safetensors file is mapped only while opening: every tensor is converted into replicas (one
 *  allocation per NUMA node, bound there), so the open model holds no file and a file replaced
 *  later changes nothing.
 */
#include "kernels/kernels.h" // `uform_gemm_pin`, `uform_arena_trim`
#include "models/config.h"
#include "models/image_tower.h"
#include "models/model.h"
#include "models/safetensors.h"
#include "models/text_vram.h"
#include "internal.h"

#include <stdatomic.h> // `atomic_size_t`
#include <stdint.h>    // `uintptr_t`
#include <errno.h>     // `ENOENT`
#include <stdio.h>     // `snprintf`
#include <sys/stat.h>  // `stat`
#include <stdlib.h>    // `calloc`, `free`
#include <string.h>    // `memset`, `strlen`

/** Joins `directory/name`, INVALID_ARGUMENT when it does not fit. */
static uform_status_t uform_join(char *buffer, size_t capacity, char const *directory, char const *name) {
    int const written = snprintf(buffer, capacity, "%s/%s", directory, name);
    if (written < 0 || (size_t)written >= capacity)
        return uform_fail(uform_status_invalid_argument_k, "model path is too long: %.64s...", directory);
    return uform_status_ok_k;
}

/** Reads and parses a JSON file; `*root` stays NULL when `optional` and the file is absent. */
static uform_status_t uform_load_json(char const *path, int optional, void **root) {
    char *text;
    size_t length;
    int missing = 0;
    *root = NULL;
    uform_status_t status = uform_read_small_file(path, &text, &length, optional ? &missing : NULL);
    if (status != uform_status_ok_k || missing) return status;
    status = uform_json_parse(path, text, length, root);
    free(text);
    return status;
}

#define UFORM_CHECK(expression)                                                                                        \
    do {                                                                                                               \
        status = (expression);                                                                                         \
        if (status != uform_status_ok_k) goto done;                                                                    \
    } while (0)

/** Reads `folder`/`name` (absent: nothing when `optional`) with `read`, one of config.h's readers. */
static uform_status_t uform_read_config_file(char const *folder, char const *name, int optional,
                                             uform_status_t (*read)(char const *, void const *, uform_text_config_t *),
                                             uform_text_config_t *config) {
    char path[4096];
    void *root = NULL;
    uform_status_t status;
    UFORM_CHECK(uform_join(path, sizeof(path), folder, name));
    UFORM_CHECK(uform_load_json(path, optional, &root));
    if (root) UFORM_CHECK(read(path, root, config));
done:
    uform_json_free(root);
    return status;
}

/** Weights this engine does not read, where `model.safetensors` (`path`) is absent: UNSUPPORTED naming them
 *  rather than the missing file. */
static uform_status_t uform_weights_layout_check(char const *folder, char const *path) {
    struct stat info;
    if (stat(path, &info) == 0 || errno != ENOENT) return uform_status_ok_k; /* opening it says what is wrong */
    static char const *const others[][2] = {
        {"model.safetensors.index.json", "weights sharded over several safetensors files are not supported; merge them "
                                         "into one model.safetensors"},
        {"pytorch_model.bin", "only safetensors weights are read; save the model with safetensors (model.safetensors)"},
        {"model.onnx", "only safetensors weights are read"}};
    char other[4096];
    for (size_t k = 0; k < sizeof(others) / sizeof(others[0]); ++k) {
        if (uform_join(other, sizeof(other), folder, others[k][0]) != uform_status_ok_k) break;
        if (stat(other, &info) == 0)
            return uform_fail(uform_status_unsupported_k, "%s: no model.safetensors beside %s: %s", folder, others[k][0],
                              others[k][1]);
    }
    return uform_status_ok_k;
}

/** The Transformer module's folder: `directory`, or its `transformer_path` below it (older releases). */
static uform_status_t uform_transformer_folder(char const *directory, uform_text_config_t const *config, char *folder,
                                               size_t capacity) {
    if (!config->transformer_path[0]) {
        if (strlen(directory) >= capacity)
            return uform_fail(uform_status_invalid_argument_k, "model path is too long: %.64s...", directory);
        memcpy(folder, directory, strlen(directory) + 1);
        return uform_status_ok_k;
    }
    return uform_join(folder, capacity, directory, config->transformer_path);
}

/** The Transformer module's settings file: sentence-transformers reads the first of these that holds
 *  any key (older releases named it after the architecture). */
static uform_status_t uform_read_sentence_config(char const *folder, uform_text_config_t *config) {
    static char const *const names[] = {"sentence_bert_config.json", "sentence_roberta_config.json",
                                        "sentence_distilbert_config.json", "sentence_camembert_config.json",
                                        "sentence_albert_config.json", "sentence_xlm-roberta_config.json",
                                        "sentence_xlnet_config.json"};
    char path[4096];
    void *root = NULL;
    uform_status_t status = uform_status_ok_k;
    for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); ++k) {
        UFORM_CHECK(uform_join(path, sizeof(path), folder, names[k]));
        UFORM_CHECK(uform_load_json(path, 1, &root));
        if (root && !uform_json_is_empty_object(root)) {
            status = uform_config_sentence_bert(path, root, config);
            break;
        }
        uform_json_free(root), root = NULL;
    }
done:
    uform_json_free(root);
    return status;
}

/** Reads the configuration files of `directory` into `config`. */
static uform_status_t uform_read_text_config(char const *directory, uform_text_config_t *config) {
    char path[4096], folder[4096];
    void *root = NULL;
    uform_status_t status;
    uform_text_layout_t layout;
    /* sentence-transformers: modules.json names the Transformer's folder (which holds config.json), the
     * pooling folder and normalisation. */
    uform_text_config_t modules = {0};
    UFORM_CHECK(uform_read_config_file(directory, "modules.json", 1, uform_config_modules, &modules));
    UFORM_CHECK(uform_transformer_folder(directory, &modules, folder, sizeof(folder)));
    UFORM_CHECK(uform_join(path, sizeof(path), folder, "config.json"));
    UFORM_CHECK(uform_load_json(path, 0, &root));
    UFORM_CHECK(uform_config_layout(path, root, &layout));
    if (layout == uform_text_layout_uform3_k) {
        if (modules.transformer_path[0]) { /* UForm3 files are read from the model's own folder */
            status = uform_fail(uform_status_unsupported_k, "%s: a UForm3 config.json in a sentence-transformers "
                                "Transformer folder is not supported", path);
            goto done;
        }
        UFORM_CHECK(uform_config_uform3(path, root, config));
        goto done;
    }
    UFORM_CHECK(uform_config_bert(path, root, config));
    memcpy(config->transformer_path, modules.transformer_path, sizeof(config->transformer_path));
    memcpy(config->pooling_path, modules.pooling_path, sizeof(config->pooling_path));
    config->has_pooling_module = modules.has_pooling_module;
    config->normalize = modules.normalize;
    if (config->has_pooling_module) { // modules.json was there: its Pooling module's folder
        char pooling[4096];
        UFORM_CHECK(uform_join(pooling, sizeof(pooling), directory, config->pooling_path));
        UFORM_CHECK(uform_read_config_file(pooling, "config.json", 0, uform_config_pooling, config));
    }
    UFORM_CHECK(uform_read_sentence_config(folder, config));
    UFORM_CHECK(uform_read_config_file(folder, "tokenizer_config.json", 1, uform_config_tokenizer, config));
    UFORM_CHECK(uform_read_config_file(directory, "config_sentence_transformers.json", 1, uform_config_prompts, config));
    if (config->prompt[0] && config->excludes_prompt) {
        status = uform_fail(uform_status_unsupported_k, "%s: the Pooling module's include_prompt false with a default "
                            "prompt (config_sentence_transformers.json) is not supported: pooling would leave the "
                            "prompt's tokens out", directory);
        goto done;
    }
    uform_config_bert_context(config);
done:
    if (status == uform_status_ok_k) status = uform_config_context_check(path, config);
    uform_json_free(root);
    return status;
}

uform_status_t uform_replica_memory_alloc(struct uform_model_s *model, uform_placement_t const *placement,
                                          size_t block_bytes, void **towers, size_t tower_size, size_t layers,
                                          size_t layer_size, char const *directory) {
    uform_replica_memory_t *memory = &model->memory;
    size_t const replicas = placement->domains_count;
    model->replica_nodes = calloc(replicas, sizeof(int32_t));
    *towers = calloc(replicas, tower_size);
    memory->blocks = calloc(replicas, sizeof(void *));
    memory->layers = calloc(replicas, sizeof(void *));
    memory->block_bytes = block_bytes;
    if (!model->replica_nodes || !*towers || !memory->blocks || !memory->layers)
        return uform_fail(uform_status_out_of_memory_k, "out of memory for %zu replicas", replicas);
    for (size_t i = 0; i < replicas; ++i) {
        int32_t const node = placement->domain_nodes[i];
        model->replica_nodes[i] = node;
        ++model->replicas_count; /* counted first, so a failure below frees what was made */
        memory->blocks[i] = uform_numa_alloc(block_bytes, node);
        memory->layers[i] = calloc(layers ? layers : 1, layer_size);
        if (!memory->blocks[i] || !memory->layers[i])
            return uform_fail(uform_status_out_of_memory_k, "out of memory for a %zu-byte replica of %s on node %d",
                              block_bytes, directory, (int)node);
        uform_gemm_pin_on(memory->blocks[i], block_bytes, node); /* packed lazily, on the replica's node */
    }
    return uform_status_ok_k;
}

void uform_replica_memory_free(struct uform_model_s *model) {
    uform_replica_memory_t *memory = &model->memory;
    for (size_t i = 0; i < model->replicas_count; ++i) {
        if (memory->blocks && memory->blocks[i]) uform_gemm_unpin(memory->blocks[i], memory->block_bytes);
        if (memory->blocks && memory->blocks[i]) uform_numa_free(memory->blocks[i], memory->block_bytes);
        if (memory->layers) free(memory->layers[i]);
    }
    free(memory->blocks);
    free(memory->layers);
    *memory = (uform_replica_memory_t){0};
}

/* Models allocated and not yet freed: the last one freed returns the pooled activation arenas. */
static atomic_size_t models_live;

/** A zeroed model, counted live until `uform_model_free`. */
static struct uform_model_s *model_new(void) {
    struct uform_model_s *model = calloc(1, sizeof(struct uform_model_s));
    if (model) atomic_fetch_add(&models_live, 1);
    return model;
}

void uform_model_free(uform_model_t model) {
    if (!model) return;
    uform_text_vram_free(model);
    uform_image_model_release(model);
    uform_replica_memory_free(model);
    if (model->tokenizer) uform_tokenizer_free(model->tokenizer);
    free(model->text_replicas);
    free(model->replica_nodes);
    free(model);
    /* No model left, so no call runs a forward pass: what the arenas pooled goes back to the system. */
    if (atomic_fetch_sub(&models_live, 1) == 1) uform_arena_trim();
}

uform_status_t uform_model_open(uform_model_options_t const *options, uform_model_t *result) {
    if (!result) return uform_fail(uform_status_invalid_argument_k, "model is NULL");
    *result = NULL;
    if (!options) return uform_fail(uform_status_invalid_argument_k, "options are NULL");
    if (!options->path) return uform_fail(uform_status_invalid_argument_k, "options.path is NULL");
    if (!options->path[0]) return uform_fail(uform_status_invalid_argument_k, "options.path is empty");
    if ((unsigned)options->modality > uform_modality_image_k)
        return uform_fail(uform_status_invalid_argument_k, "options.modality %d is not a modality", (int)options->modality);
    if ((unsigned)options->residency > uform_residency_vram_k)
        return uform_fail(uform_status_invalid_argument_k, "options.residency %d is not a residency", (int)options->residency);
    if (options->residency == uform_residency_any_k)
        return uform_fail(uform_status_invalid_argument_k, "options.residency must be RAM or VRAM, not ANY");
    if ((unsigned)options->weights_dtype > uform_dtype_i32_k)
        return uform_fail(uform_status_invalid_argument_k, "options.weights_dtype %d is not a dtype", (int)options->weights_dtype);
    if (options->weights_dtype != uform_dtype_f32_k && options->weights_dtype != uform_dtype_bf16_k &&
        options->weights_dtype != uform_dtype_f16_k)
        return uform_fail(uform_status_unsupported_k, "options.weights_dtype must be f32, bf16 or f16");
    if (options->ram && !options->ram->memory_domains && options->ram->memory_domains_count)
        return uform_fail(uform_status_invalid_argument_k, "ram.memory_domains is NULL with a count of %zu",
                          options->ram->memory_domains_count);
    if (options->vram && !options->vram->devices && options->vram->devices_count)
        return uform_fail(uform_status_invalid_argument_k, "vram.devices is NULL with a count of %zu",
                          options->vram->devices_count);
    /* What needs no driver to judge, before any file is read: negative and repeated ordinals (an
     * ordinal past the machine's GPUs is judged once the driver counts them). */
    if (options->residency == uform_residency_vram_k) {
        uform_status_t const devices = uform_vram_devices_check(options->vram, "uform_model_open", "vram.");
        if (devices != uform_status_ok_k) return devices;
    }
    if (options->modality == uform_modality_image_k) {
        struct uform_model_s *image = model_new();
        if (!image) return uform_fail(uform_status_out_of_memory_k, "out of memory opening a model");
        image->modality = options->modality;
        image->residency = options->residency;
        image->weights_dtype = options->weights_dtype;
        uform_status_t const loaded = uform_image_model_load(image, options);
        if (loaded != uform_status_ok_k) {
            uform_model_free(image);
            return loaded;
        }
        *result = image;
        return uform_status_ok_k;
    }

    char const *directory = options->path;
    uform_dtype_t const dtype = options->weights_dtype;
    uform_placement_t placement = {0};
    uform_safetensors_t index = {0};
    uform_binding_t *bindings = NULL;
    size_t bindings_count = 0;
    uform_text_config_t *config = calloc(1, sizeof(uform_text_config_t));
    struct uform_model_s *model = model_new();
    uform_status_t status = uform_status_ok_k;
    if (!config || !model) {
        free(model), free(config);
        return uform_fail(uform_status_out_of_memory_k, "out of memory opening a model");
    }
    model->modality = options->modality;
    model->residency = options->residency;
    model->weights_dtype = dtype;

    UFORM_CHECK(uform_placement_resolve(options->residency == uform_residency_vram_k ? NULL : options->ram, &placement));
    /* VRAM: one host tower (uploaded, then kept for the shapes and the tokenizer's context). */
    if (options->residency == uform_residency_vram_k && placement.domains_count > 1) placement.domains_count = 1;
    UFORM_CHECK(uform_read_text_config(directory, config));

    char path[4096], folder[4096];
    UFORM_CHECK(uform_transformer_folder(directory, config, folder, sizeof(folder)));
    UFORM_CHECK(uform_join(path, sizeof(path), folder,
                           config->layout == uform_text_layout_uform3_k ? "text_encoder.safetensors" : "model.safetensors"));
    if (config->layout == uform_text_layout_bert_k) UFORM_CHECK(uform_weights_layout_check(folder, path));
    UFORM_CHECK(uform_safetensors_open(path, &index));
    UFORM_CHECK(uform_config_bind(config, &index, &bindings, &bindings_count));

    UFORM_CHECK(uform_tokenizer_open(folder, config->layout == uform_text_layout_uform3_k ? NULL : &config->tokenizer,
                                     &model->tokenizer));
    if (config->prompt[0]) UFORM_CHECK(uform_tokenizer_set_prompt(model->tokenizer, config->prompt));
    size_t const tokens = uform_tokenizer_vocab_size(model->tokenizer);
    if (tokens > config->vocab_size) {
        status = uform_fail(uform_status_corrupt_file_k,
                            "%s: %s has %zu tokens, more than the %zu rows of the word embeddings (config.json's %s)",
                            directory, uform_tokenizer_file_name(model->tokenizer), tokens, config->vocab_size,
                            config->layout == uform_text_layout_uform3_k ? "'text_encoder.vocab_size'" : "'vocab_size'");
        goto done;
    }
    /* sentence-transformers truncates from the left where the tokenizer says so; this engine does not. */
    if (config->layout == uform_text_layout_bert_k && (config->truncates_left || uform_tokenizer_truncates_left(model->tokenizer))) {
        status = uform_fail(uform_status_unsupported_k, "%s: %s truncates texts from the left, which is not supported",
                            directory, config->truncates_left ? "tokenizer_config.json's 'truncation_side'"
                                                              : "tokenizer.json's 'truncation'");
        goto done;
    }
    /* UForm3 towers truncate as the `uform` package's processor: its slice to the context may drop the
     * closing specials. Not with RoBERTa positions, where that slice (to max_position_embeddings) runs
     * past the position table: those keep the specials within the context that fits it. */
    if (config->layout == uform_text_layout_uform3_k)
        UFORM_CHECK(uform_tokenizer_use_processor_truncation(model->tokenizer, directory,
                                                             config->position_ids == uform_position_ids_absolute_k));
    size_t const specials = uform_tokenizer_specials_count(model->tokenizer);
    if (specials > config->context) {
        status = uform_fail(uform_status_corrupt_file_k,
                            "%s: the tokenizer adds %zu special tokens to every text, more than the model's context of %zu",
                            directory, specials, config->context);
        goto done;
    }

    /* One replica per chosen memory domain, each bound to its node. */
    void *towers = NULL;
    status = uform_replica_memory_alloc(model, &placement, uform_replica_bytes(bindings, bindings_count, dtype),
                                        &towers, sizeof(uform_text_tower_t), config->layers_count,
                                        sizeof(uform_text_layer_t), directory);
    model->text_replicas = towers; // freed with the model, even after a failure
    if (status != uform_status_ok_k) goto done;
    for (size_t i = 0; i < model->replicas_count; ++i)
        uform_text_tower_fill(config, bindings, bindings_count, dtype, model->memory.blocks[i], model->memory.layers[i],
                              &model->text_replicas[i]);
    UFORM_CHECK(uform_bindings_check(path, bindings, bindings_count, dtype, model->memory.blocks[0]));

    size_t parameters = 0;
    for (size_t i = 0; i < bindings_count; ++i) parameters += bindings[i].rows * bindings[i].cols;
    uform_model_description_t *description = &model->description;
    description->modality = model->modality;
    description->residency = model->residency;
    description->weights_dtype = dtype;
    description->dimensions = config->embedding_dimensions;
    memcpy(description->matryoshka_dimensions, config->matryoshka, sizeof(config->matryoshka));
    description->context = config->context;
    description->hidden = config->hidden;
    description->tokens = config->context;
    description->layers = config->layers_count;
    description->parameters = parameters;
    description->replicas = model->replicas_count;
    if (options->residency == uform_residency_vram_k) {
        UFORM_CHECK(uform_text_vram_open(model, options->vram));
        description->replicas = uform_text_vram_copies(model);
    }

done:
    free(bindings);
    uform_safetensors_close(&index);
    uform_placement_free(&placement);
    free(config);
    if (status != uform_status_ok_k) {
        uform_model_free(model);
        return status;
    }
    *result = model;
    return uform_status_ok_k;
}

uform_status_t uform_model_describe(uform_model_t model, uform_model_description_t *description) {
    if (!model) return uform_fail(uform_status_invalid_argument_k, "model is NULL");
    if (!description) return uform_fail(uform_status_invalid_argument_k, "description is NULL");
    *description = model->description;
    return uform_status_ok_k;
}

uform_status_t uform_model_tokenize(uform_model_t model, char const *text, size_t length, int32_t *ids, size_t capacity,
                                    size_t *count) {
    if (!model) return uform_fail(uform_status_invalid_argument_k, "model is NULL");
    if (!count) return uform_fail(uform_status_invalid_argument_k, "count is NULL");
    *count = 0;
    if (!text && length) return uform_fail(uform_status_invalid_argument_k, "text is NULL with a length of %zu", length);
    if (!ids && capacity) return uform_fail(uform_status_invalid_argument_k, "ids is NULL with a capacity of %zu", capacity);
    if (model->modality != uform_modality_text_k || !model->tokenizer || !model->replicas_count)
        return uform_fail(uform_status_unsupported_k, "an image model has no tokenizer");
    return uform_tokenizer_encode(model->tokenizer, text ? text : "", length, model->text_replicas[0].context, ids,
                                  capacity, count);
}

uform_text_tower_t const *uform_model_text_replica(struct uform_model_s const *model, int32_t node) {
    if (!model || !model->text_replicas || !model->replicas_count) return NULL;
    for (size_t i = 0; i < model->replicas_count; ++i)
        if (model->replica_nodes[i] == node) return &model->text_replicas[i];
    return &model->text_replicas[0];
}

/** The checks of `embeddings.features`: a stride that holds an item's `elements`, items that end
 *  inside the address space. */
static uform_status_t features_check(char const *prefix, char const *items, size_t elements,
                                     uform_embeddings_t const *embeddings, size_t count) {
    size_t element = uform_dtype_bytes(embeddings->dtype), item = 0, span = 0;
    uintptr_t end = 0;
    if (__builtin_mul_overflow(elements, element, &item))
        return uform_fail(uform_status_invalid_argument_k, "%sembeddings.features: %zu values per item overflow", prefix,
                          elements);
    if (embeddings->features_stride && embeddings->features_stride < item)
        return uform_fail(uform_status_invalid_argument_k,
                          "%sembeddings.features_stride is %zu bytes; one item's features (%zu values) take %zu "
                          "(0 packs them)", prefix, embeddings->features_stride, elements, item);
    size_t stride = uform_features_stride(embeddings, elements);
    if (count && (__builtin_mul_overflow(count - 1, stride, &span) || __builtin_add_overflow(span, item, &span) ||
                  __builtin_add_overflow((uintptr_t)embeddings->features, span, &end)))
        return uform_fail(uform_status_invalid_argument_k,
                          "%sembeddings.features: %zu %s' features %zu bytes apart run past the end of the address space",
                          prefix, count, items, stride);
    return uform_status_ok_k;
}

uform_status_t uform_embeddings_check(char const *prefix, char const *items, size_t width, size_t feature_elements,
                                      uform_embeddings_t const *embeddings, size_t count) {
    if (!embeddings) return uform_fail(uform_status_invalid_argument_k, "%sembeddings is NULL", prefix);
    uform_dtype_t dtype = embeddings->dtype;
    if (dtype != uform_dtype_f32_k && dtype != uform_dtype_bf16_k && dtype != uform_dtype_f16_k)
        return uform_fail(uform_status_invalid_argument_k,
                          "%sembeddings.dtype is %d; expected f32 (0), bf16 (1) or f16 (2)", prefix, (int)dtype);
    size_t dims = embeddings->dimensions ? embeddings->dimensions : width;
    if (dims > width)
        return uform_fail(uform_status_invalid_argument_k,
                          "%sembeddings.dimensions is %zu; the model's embeddings are %zu wide (0 takes all)", prefix,
                          embeddings->dimensions, width);
    size_t row = dims * uform_dtype_bytes(dtype);
    if (embeddings->stride && embeddings->stride < row)
        return uform_fail(uform_status_invalid_argument_k,
                          "%sembeddings.stride is %zu bytes; a row of %zu %s values takes %zu (0 packs rows)", prefix,
                          embeddings->stride, dims,
                          dtype == uform_dtype_f32_k ? "f32" : dtype == uform_dtype_bf16_k ? "bf16" : "f16", row);
    if (!embeddings->data && count)
        return uform_fail(uform_status_invalid_argument_k, "%sembeddings.data is NULL for %zu %s", prefix, count, items);
    /* The last row must end inside the address space: a huge stride would wrap around to memory
     * before `data`. */
    size_t span = 0;
    uintptr_t end = 0;
    if (count && (__builtin_mul_overflow(count - 1, embeddings->stride ? embeddings->stride : row, &span) ||
                  __builtin_add_overflow(span, row, &span) || __builtin_add_overflow((uintptr_t)embeddings->data, span, &end)))
        return uform_fail(uform_status_invalid_argument_k,
                          "%sembeddings: %zu rows %zu bytes apart run past the end of the address space", prefix, count,
                          embeddings->stride ? embeddings->stride : row);
    if (embeddings->features) return features_check(prefix, items, feature_elements, embeddings, count);
    if (embeddings->features_stride)
        return uform_fail(uform_status_invalid_argument_k,
                          "%sembeddings.features_stride is %zu with no features; set both or neither", prefix,
                          embeddings->features_stride);
    return uform_status_ok_k;
}

size_t uform_features_stride(uform_embeddings_t const *embeddings, size_t elements) {
    if (embeddings->features_stride) return embeddings->features_stride;
    return elements * uform_dtype_bytes(embeddings->dtype);
}

void uform_features_write(struct uform_kernels_t const *kernels, float const *rows, size_t count, size_t hidden,
                          size_t rows_total, void *target, uform_dtype_t dtype) {
    size_t values = count * hidden, element = uform_dtype_bytes(dtype);
    switch (dtype) {
    case uform_dtype_bf16_k: kernels->f32_to_bf16(rows, (uint16_t *)target, values); break;
    case uform_dtype_f16_k: kernels->f32_to_f16(rows, (uint16_t *)target, values); break;
    default: memcpy(target, rows, values * sizeof(float)); break;
    }
    if (rows_total > count) memset((char *)target + values * element, 0, (rows_total - count) * hidden * element);
}

int32_t uform_model_thread_node(uform_executor_t executor, uform_executor_kind_t kind, size_t thread) {
    if (kind != uform_executor_kind_ram_k) return -1;
    int32_t core = -1, node = -1;
    if (uform_executor_thread_placement(executor, thread, &core, &node) != uform_status_ok_k) return -1;
    return node;
}

uform_status_t uform_model_check_replicas(char const *prefix, struct uform_model_s const *model,
                                          uform_executor_t executor, uform_executor_description_t const *description) {
    size_t threads = description->threads_count ? description->threads_count : 1;
    for (size_t t = 0; t < threads; ++t) {
        int32_t node = uform_model_thread_node(executor, description->kind, t);
        if (node < 0) continue;
        int covered = 0;
        for (size_t r = 0; r < model->replicas_count; ++r) covered |= model->replica_nodes && model->replica_nodes[r] == node;
        if (!covered)
            return uform_fail(uform_status_residency_mismatch_k,
                              "%sthe executor's thread %zu runs on NUMA node %d, which holds no replica of the model; "
                              "open the model with that node among its ram.memory_domains",
                              prefix, t, (int)node);
    }
    return uform_status_ok_k;
}
