/* amx_tiles.h — the tile configuration the AMX GEMMs (gemm_lowp_amx.c,
 * gemm_i8_amx.c) load: 8 tiles of 16 rows x 64 bytes. Each thread loads it
 * (_tile_loadconfig(&kiln__amx_config)) before its first tile instruction
 * and calls _tile_release() when done.
 *
 * GCC 12 declares only 8 of ldtilecfg's 64 bytes as read by
 * _tile_loadconfig, so a configuration filled at run time can have its
 * stores dropped; a constant object is laid out by the compiler instead. */
#ifndef KILN_CPU_AMX_TILES_H
#define KILN_CPU_AMX_TILES_H

#include <stdalign.h>
#include <stdint.h>

typedef struct kiln_amx_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} kiln_amx_config;

static const alignas(64) kiln_amx_config kiln__amx_config = {
    .palette = 1,
    .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
    .rows = {16, 16, 16, 16, 16, 16, 16, 16},
};

#endif
