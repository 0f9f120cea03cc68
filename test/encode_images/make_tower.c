/**
 *  @file   make_tower.c
 *  @brief  Writes one of towers.h's random ViT towers (or a benchmark-sized one) as a UForm3 model
 *          directory: `make_tower NAME DIRECTORY`. Prints the weights' checksum. For the CLI test and
 *          bench/bench_image_model.
 *
 *  Names: the test towers (vit-s16, vit-b16, vit-p14-reg4), `tiny` (64 wide, 1 layer, patch 16 at
 *  64 pixels) and the full-depth benchmark shapes `bench-vit-s16` (384 wide, 6 heads, 12 layers)
 *  and `bench-vit-b16` (768 wide, 12 heads, 12 layers), both patch 16 at 224 pixels.
 */
#include "towers.h"

static tower_spec_t const extra_specs[] = {
    {"tiny", 64, 2, 1, 16, 64, 32, 0, "cls", 7},
    {"bench-vit-s16", 384, 6, 12, 16, 224, 256, 0, "cls", 11},
    {"bench-vit-b16", 768, 12, 12, 16, 224, 256, 0, "cls", 12},
};

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: make_tower NAME DIRECTORY\n");
        return 2;
    }
    tower_spec_t const *spec = NULL;
    for (size_t i = 0; i < sizeof tower_specs / sizeof *tower_specs; ++i)
        if (!strcmp(argv[1], tower_specs[i].name)) spec = &tower_specs[i];
    for (size_t i = 0; i < sizeof extra_specs / sizeof *extra_specs; ++i)
        if (!strcmp(argv[1], extra_specs[i].name)) spec = &extra_specs[i];
    if (!spec) {
        fprintf(stderr, "make_tower: no tower named '%s'\n", argv[1]);
        return 2;
    }
    uint64_t checksum = tower_write(argv[2], spec);
    if (!checksum) {
        fprintf(stderr, "make_tower: cannot write %s\n", argv[2]);
        return 1;
    }
    printf("%016llx\n", (unsigned long long)checksum);
    return 0;
}
