/* enums.c: every enumeration and limit that the op shim and the Python layer name, once. The
 * values are the headers' (kernels/, mmaemu.h); mmaemu._C.enums() exports these tables and
 * ops.cpp looks names up in them, so no second table of names exists. */
#include <string.h>

#include "mmaemu.h"

#define ITEMS(array) array, (int)(sizeof array / sizeof array[0])

static const mm_enum_item split_schemes[] = {
    {"none", MM_SCHEME_NONE}, {"contiguous", MM_SCHEME_CONTIGUOUS},
    {"serial", MM_SCHEME_SERIAL}, {"pairwise", MM_SCHEME_PAIRWISE}};

static const mm_enum_item epilogues[] = {
    {"H1", MM_EPI_H1}, {"H2", MM_EPI_H2}, {"H3", MM_EPI_H3},
    {"rowwise", MM_EPI_ROWWISE}, {"rowwise_t", MM_EPI_ROWWISE_T}, {"blockwise", MM_EPI_BLOCKWISE},
    {"blockwise_pe", MM_EPI_BLOCKWISE_PE}, {"rowwise_mul", MM_EPI_ROWWISE_MUL}};

static const mm_enum_item outputs[] = {
    {"f32", MM_OUT_F32}, {"bf16", MM_OUT_BF16}, {"f16", MM_OUT_F16},
    {"e4m3", MM_OUT_E4M3}, {"e5m2", MM_OUT_E5M2}, {"acc", MM_OUT_ACC}};

static const mm_enum_item fp8_formats[] = {{"e4m3", MM_FMT_E4M3}, {"e5m2", MM_FMT_E5M2}};

static const mm_enum_item biases[] = {{"none", MM_BIAS_NONE}, {"bf16", MM_BIAS_BF16}, {"f16", MM_BIAS_F16}};

static const mm_enum_item presets[] = {
    {"hopper", MM_PRESET_HOPPER}, {"ada", MM_PRESET_ADA}, {"b200", MM_PRESET_B200}};
_Static_assert(sizeof presets / sizeof presets[0] == MM_PRESET_COUNT, "every preset has a name");

static const mm_enum_item limits[] = {
    {"max_splits", MM_MAX_SPLITS}, {"split_grain", MM_SPLIT_GRAIN}, {"max_dim", MM_MAX_DIM},
    {"max_block", MM_MAX_BLOCK}, {"max_frac", MM_MAX_FRAC}, {"max_keep", MM_MAX_KEEP},
    {"max_split_rr_tile", MM_MAX_SPLIT_RR_TILE}, {"staged_first", MM_STAGED_FIRST},
    {"staged_width", MM_STAGED_WIDTH}};

static const mm_enum_item errors[] = {
    {"ok", MM_OK}, {"argument", MM_ERR_ARGUMENT}, {"flush_denormal", MM_ERR_FLUSH_DENORMAL},
    {"no_memory", MM_ERR_NO_MEMORY}, {"unavailable", MM_ERR_UNAVAILABLE}, {"cpu_simd", MM_ERR_CPU_SIMD}};

static const mm_enum enums[] = {
    {"split_schemes", ITEMS(split_schemes)}, {"epilogues", ITEMS(epilogues)},
    {"outputs", ITEMS(outputs)},             {"fp8_formats", ITEMS(fp8_formats)},
    {"biases", ITEMS(biases)},               {"presets", ITEMS(presets)},
    {"limits", ITEMS(limits)},               {"errors", ITEMS(errors)}};

int mmaemu_enum_count(void) { return (int)(sizeof enums / sizeof enums[0]); }

const mm_enum* mmaemu_enum_at(int i) { return i >= 0 && i < mmaemu_enum_count() ? &enums[i] : NULL; }

int64_t mmaemu_enum_value(const char* enumeration, const char* name) {
    for (int i = 0; enumeration && name && i < mmaemu_enum_count(); i++) {
        if (strcmp(enums[i].name, enumeration) != 0) continue;
        for (int j = 0; j < enums[i].count; j++)
            if (strcmp(enums[i].items[j].name, name) == 0) return enums[i].items[j].value;
    }
    return -1;
}

int mmaemu_preset_id(const char* name) { return (int)mmaemu_enum_value("presets", name); }
