/**
 *  @file   text_towers.h
 *  @brief  Deterministic random UForm3 text towers (`config.json` with a `text_encoder` section,
 *          `text_encoder.safetensors` in F32, and a stub `vocab.txt`), from the weight stream of
 *          random_weights.h, so test_encode checks the forward pass against the `uform` package's
 *          PyTorch `TextEncoder` without torch at test time. test/encode/make_references.py (`uform3`)
 *          draws the same values bit for bit and commits the expected embeddings.
 *
 *  Ranges (uniform, `center +- half`): word and position embeddings +-0.8; LayerNorm gains 1 +- 0.3 and
 *  biases +-0.2 (away from one and zero); every bias +-0.2; query and key matrices +-2 sqrt(3 / fan_in)
 *  (peaked attention), the other matrices +-1.2 sqrt(3 / fan_in), so attention and MLP products are as
 *  large as the residual and activations stay O(1). Tensors the forward pass does not read (cross-attention
 *  of the multimodal layers, matching head, context projection) are written too, as in real checkpoints.
 */
#ifndef UFORM_TEST_ENCODE_TEXT_TOWERS_H
#define UFORM_TEST_ENCODE_TEXT_TOWERS_H

#include "random_weights.h"

typedef struct text_tower_spec_t {
    char const *name;
    size_t dim, context_dim, heads, layers, embedding_dim, vocab, max_positions, padding_idx;
    size_t first_multimodal; /**< Layers from this one on are multimodal (`layers` when none). */
    int head_one_neuron;
    char const *pooling;
    uint64_t seed;
} text_tower_spec_t;

/** The towers test_encode runs (make_references.py's UFORM3_CONFIGS has the same). */
static text_tower_spec_t const text_tower_specs[] = {
    {"uform3-768-cls", 768, 256, 12, 4, 256, 30522, 66, 0, 2, 0, "cls", 0x7e470001u},
    {"uform3-384-mean", 384, 384, 6, 2, 384, 30522, 66, 0, 2, 1, "mean", 0x7e470002u},
};

/** Lists the tensors of `spec` in stream order (the PyTorch state dict's); returns how many. */
static size_t text_tower_tensors(text_tower_spec_t const *spec, tower_tensor_t *out) {
    size_t count = 0, d = spec->dim;
    double const matrix = 1.2 * sqrt(3.0 / d), peaked = 2.0 * sqrt(3.0 / d);
    TOWER_NAME("word_embeddings.weight"); TOWER_ADD(2, 0, 0.8, spec->vocab, d);
    TOWER_NAME("position_embeddings.weight"); TOWER_ADD(2, 0, 0.8, spec->max_positions, d);
    TOWER_NAME("layer_norm.weight"); TOWER_ADD(1, 1, 0.3, d);
    TOWER_NAME("layer_norm.bias"); TOWER_ADD(1, 0, 0.2, d);
    char const *projections[] = {"query", "key", "value", "out"};
    for (size_t l = 0; l < spec->layers; ++l) {
        char const *attentions[] = {"attention", "crossattn"}, *norms[] = {"norm_attn", "norm_crossattn"};
        for (int a = 0; a < (l >= spec->first_multimodal ? 2 : 1); ++a) {
            TOWER_NAME("blocks.%zu.%s.weight", l, norms[a]); TOWER_ADD(1, 1, 0.3, d);
            TOWER_NAME("blocks.%zu.%s.bias", l, norms[a]); TOWER_ADD(1, 0, 0.2, d);
            for (int i = 0; i < 4; ++i) {
                TOWER_NAME("blocks.%zu.%s.%s.weight", l, attentions[a], projections[i]);
                TOWER_ADD(2, 0, i < 2 ? peaked : matrix, d, d);
                TOWER_NAME("blocks.%zu.%s.%s.bias", l, attentions[a], projections[i]); TOWER_ADD(1, 0, 0.2, d);
            }
        }
        TOWER_NAME("blocks.%zu.norm_mlp.weight", l); TOWER_ADD(1, 1, 0.3, d);
        TOWER_NAME("blocks.%zu.norm_mlp.bias", l); TOWER_ADD(1, 0, 0.2, d);
        TOWER_NAME("blocks.%zu.mlp.hidden_layer.weight", l); TOWER_ADD(2, 0, matrix, 4 * d, d);
        TOWER_NAME("blocks.%zu.mlp.hidden_layer.bias", l); TOWER_ADD(1, 0, 0.2, 4 * d);
        TOWER_NAME("blocks.%zu.mlp.output_layer.weight", l); TOWER_ADD(2, 0, 1.2 * sqrt(3.0 / (4.0 * d)), d, 4 * d);
        TOWER_NAME("blocks.%zu.mlp.output_layer.bias", l); TOWER_ADD(1, 0, 0.2, d);
    }
    size_t heads = spec->head_one_neuron ? 1 : 2;
    TOWER_NAME("embedding_projection.weight"); TOWER_ADD(2, 0, matrix, spec->embedding_dim, d);
    TOWER_NAME("matching_head.weight"); TOWER_ADD(2, 0, matrix, heads, d);
    TOWER_NAME("matching_head.bias"); TOWER_ADD(1, 0, 0.2, heads);
    if (spec->context_dim != d) {
        TOWER_NAME("context_projection.weight");
        TOWER_ADD(2, 0, 1.2 * sqrt(3.0 / spec->context_dim), d, spec->context_dim);
    }
    return count;
}

/**
 *  @brief Writes `directory/config.json`, `directory/text_encoder.safetensors` and a stub
 *  `directory/vocab.txt` (BERT's five special tokens: the engine needs a tokenizer to open a text tower;
 *  test_encode gives ids, and copies MiniLM's tokenizer.json beside it to check tokenising too), creating
 *  the directory; returns the weights' checksum (random_weights.h), 0 on failure.
 */
static uint64_t text_tower_write(char const *directory, text_tower_spec_t const *spec) {
    mkdir(directory, 0755);
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", directory);
    FILE *file = fopen(path, "w");
    if (!file) return 0;
    fprintf(file, "{\"text_encoder\": {\"model_type\": \"roberta\", \"dim\": %zu, \"context_dim\": %zu, \"vocab_size\": %zu, "
                  "\"padding_idx\": %zu, \"num_layers\": %zu, \"num_heads\": %zu, \"embedding_dim\": %zu, "
                  "\"multimodal_layers_ids\": [",
            spec->dim, spec->context_dim, spec->vocab, spec->padding_idx, spec->layers, spec->heads, spec->embedding_dim);
    for (size_t l = spec->first_multimodal; l < spec->layers; ++l)
        fprintf(file, "%s%zu", l > spec->first_multimodal ? ", " : "", l);
    fprintf(file, "], \"head_one_neuron\": %s, \"pooling\": \"%s\", \"max_position_embeddings\": %zu}}\n",
            spec->head_one_neuron ? "true" : "false", spec->pooling, spec->max_positions);
    if (fclose(file) != 0) return 0;
    snprintf(path, sizeof path, "%s/vocab.txt", directory);
    file = fopen(path, "w");
    if (!file) return 0;
    fputs("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n", file);
    if (fclose(file) != 0) return 0;

    size_t count = text_tower_tensors(spec, NULL);
    tower_tensor_t *tensors = (tower_tensor_t *)calloc(count, sizeof(tower_tensor_t));
    if (!tensors) return 0;
    text_tower_tensors(spec, tensors);
    snprintf(path, sizeof path, "%s/text_encoder.safetensors", directory);
    uint64_t hash = tower_write_safetensors(path, tensors, count, spec->seed);
    free(tensors);
    return hash;
}

#endif // UFORM_TEST_ENCODE_TEXT_TOWERS_H
