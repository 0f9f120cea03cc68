/**
 *  @file   fuzz_config.c
 *  @brief  libFuzzer target for the model-configuration readers. The first byte picks the reader:
 *          0 `config.json` (either layout), 1 `modules.json`, 2 a Pooling `config.json`,
 *          3 `sentence_bert_config.json`, 4 `tokenizer_config.json`, and 5 and above the whole
 *          text path: `config.json`, a NUL byte, then a `.safetensors` file, bound into a tower
 *          that is filled in f32 and bf16 (reading every bound tensor).
 */
#include "models/config.h"
#include "models/safetensors.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(uint8_t const *data, size_t size);

/** A BERT config the sentence-transformers readers refine. */
static char const uform_fuzz_bert[] = "{\"model_type\": \"bert\", \"hidden_size\": 8, \"num_attention_heads\": 2,"
                                      " \"num_hidden_layers\": 1, \"intermediate_size\": 16, \"vocab_size\": 32,"
                                      " \"max_position_embeddings\": 16}";

static void uform_fuzz_config(char const *text, size_t length, uform_text_config_t *config) {
    void *root = NULL;
    uform_text_layout_t layout;
    if (uform_json_parse("config.json", text, length, &root) == uform_status_ok_k &&
        uform_config_layout("config.json", root, &layout) == uform_status_ok_k) {
        if (layout == uform_text_layout_uform3_k) uform_config_uform3("config.json", root, config);
        else uform_config_bert("config.json", root, config);
    }
    uform_json_free(root);
}

static void uform_fuzz_whole(char const *text, size_t length, uint8_t const *file, size_t file_size) {
    void *root = NULL;
    uform_text_layout_t layout;
    uform_text_config_t config;
    memset(&config, 0, sizeof(config));
    uform_status_t status = uform_json_parse("config.json", text, length, &root);
    if (status == uform_status_ok_k) status = uform_config_layout("config.json", root, &layout);
    if (status == uform_status_ok_k)
        status = layout == uform_text_layout_uform3_k ? uform_config_uform3("config.json", root, &config)
                                                      : uform_config_bert("config.json", root, &config);
    uform_json_free(root);
    if (status != uform_status_ok_k) return;
    uform_safetensors_t index;
    if (uform_safetensors_parse("model.safetensors", file, file_size, &index) != uform_status_ok_k) return;
    uform_binding_t *bindings = NULL;
    size_t count = 0;
    if (uform_config_bind(&config, &index, &bindings, &count) == uform_status_ok_k) {
        uform_dtype_t const dtypes[] = {uform_dtype_f32_k, uform_dtype_bf16_k};
        for (size_t d = 0; d < 2; ++d) {
            size_t const bytes = uform_replica_bytes(bindings, count, dtypes[d]);
            if (bytes > ((size_t)64 << 20)) break;
            void *block = aligned_alloc(64, bytes ? bytes : 64);
            uform_text_layer_t *layers = calloc(config.layers_count ? config.layers_count : 1, sizeof(uform_text_layer_t));
            uform_text_tower_t tower;
            if (block && layers) uform_text_tower_fill(&config, bindings, count, dtypes[d], block, layers, &tower);
            free(block), free(layers);
        }
    }
    free(bindings);
    uform_safetensors_close(&index);
}

int LLVMFuzzerTestOneInput(uint8_t const *data, size_t size) {
    if (!size) return 0;
    uint8_t const selector = data[0];
    char const *text = (char const *)data + 1;
    size_t const length = size - 1;
    uform_text_config_t config;
    memset(&config, 0, sizeof(config));
    if (selector >= 5) {
        uint8_t const *split = memchr(text, '\0', length);
        if (!split) return 0;
        size_t const json_length = (size_t)(split - (uint8_t const *)text);
        uform_fuzz_whole(text, json_length, split + 1, length - json_length - 1);
        return 0;
    }
    if (selector == 0) {
        uform_fuzz_config(text, length, &config);
        return 0;
    }
    uform_fuzz_config(uform_fuzz_bert, sizeof(uform_fuzz_bert) - 1, &config);
    void *root = NULL;
    if (uform_json_parse("fuzz.json", text, length, &root) != uform_status_ok_k) return 0;
    switch (selector) {
    case 1: uform_config_modules("modules.json", root, &config); break;
    case 2: uform_config_pooling("1_Pooling/config.json", root, &config); break;
    case 3: /* the two sentence-transformers settings files */
        uform_config_sentence_bert("sentence_bert_config.json", root, &config);
        uform_config_prompts("config_sentence_transformers.json", root, &config);
        break;
    default: uform_config_tokenizer("tokenizer_config.json", root, &config); break;
    }
    uform_json_free(root);
    return 0;
}
