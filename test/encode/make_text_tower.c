/**
 *  @file   make_text_tower.c
 *  @brief  Writes one of text_towers.h's random UForm3 text towers as a model directory:
 *          `make_text_tower NAME DIRECTORY`. Prints the weights' checksum (test/encode/uform3_test.sh
 *          compares it with uform3_references.txt, made by make_references.py).
 */
#include "text_towers.h"

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: make_text_tower NAME DIRECTORY\n");
        return 2;
    }
    text_tower_spec_t const *spec = NULL;
    for (size_t i = 0; i < sizeof text_tower_specs / sizeof *text_tower_specs; ++i)
        if (!strcmp(argv[1], text_tower_specs[i].name)) spec = &text_tower_specs[i];
    if (!spec) {
        fprintf(stderr, "make_text_tower: no tower named '%s'\n", argv[1]);
        return 2;
    }
    uint64_t checksum = text_tower_write(argv[2], spec);
    if (!checksum) {
        fprintf(stderr, "make_text_tower: cannot write %s\n", argv[2]);
        return 1;
    }
    printf("%016llx\n", (unsigned long long)checksum);
    return 0;
}
