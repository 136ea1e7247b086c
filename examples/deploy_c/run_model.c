/* run_model: runs an exported Tessera model on raw input files and writes raw outputs.
 *
 *   cc -O2 -DPREFIX=model -DHEADER='"model.h"' -I DIR run_model.c -L DIR -lmodel -o run_model
 *   ./run_model THREADS REPEAT in0.bin [in1.bin ...] -- out0.bin [out1.bin ...]
 *
 * A model exported with symbolic dimensions (compile with -DSIZED) takes each input's shape
 * before its file, and runs at the sizes they give:
 *
 *   ./run_model THREADS REPEAT 2x7 in0.bin [2x7 in1.bin ...] -- out0.bin [...]
 *
 * Each file holds a tensor's bytes, C-contiguous, in the dtype the header lists. REPEAT > 1
 * runs the model that many times and prints the mean time per run (ms). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include HEADER

#define CAT2(a, b) a##_##b
#define CAT(a, b) CAT2(a, b)
#define API(name) CAT(PREFIX, name)

#ifdef SIZED
#define PER_INPUT 2
#else
#define PER_INPUT 1
#endif

static void *read_file(const char *path, size_t expected) {
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "cannot open %s\n", path); exit(2); }
    void *data = malloc(expected ? expected : 1);
    size_t got = fread(data, 1, expected, f);
    int extra = fgetc(f);
    fclose(f);
    if (got != expected || extra != EOF) {
        fprintf(stderr, "%s: expected %zu bytes\n", path, expected);
        exit(2);
    }
    return data;
}

static size_t itemsize(const char *dtype) {
    if (!strcmp(dtype, "float64") || !strcmp(dtype, "int64") || !strcmp(dtype, "uint64"))
        return 8;
    if (!strcmp(dtype, "float32") || !strcmp(dtype, "int32") || !strcmp(dtype, "uint32"))
        return 4;
    if (!strcmp(dtype, "float16") || !strcmp(dtype, "bfloat16") || !strcmp(dtype, "int16") ||
        !strcmp(dtype, "uint16"))
        return 2;
    return 1;
}

int main(int argc, char **argv) {
    int n_in = API(num_inputs)(), n_out = API(num_outputs)();
    int sep = 3 + PER_INPUT * n_in;
    if (argc != sep + 1 + n_out || strcmp(argv[sep], "--") != 0) {
        fprintf(stderr, "usage: %s THREADS REPEAT", argv[0]);
        for (int i = 0; i < n_in; i++)
            fprintf(stderr, PER_INPUT == 2 ? " DIMS %s.bin" : " %s.bin", API(input_name)(i));
        fprintf(stderr, " --");
        for (int i = 0; i < n_out; i++) fprintf(stderr, " %s.bin", API(output_name)(i));
        fprintf(stderr, "\n");
        return 2;
    }
    int threads = atoi(argv[1]), repeat = atoi(argv[2]);
    const void **inputs = calloc((size_t)n_in + 1, sizeof *inputs);
    void **outputs = calloc((size_t)n_out + 1, sizeof *outputs);
    size_t *out_bytes = calloc((size_t)n_out + 1, sizeof *out_bytes);
#ifdef SIZED
    int64_t dims[64][8];
    const int64_t *dim_ptrs[64];
    int64_t sizes[64];
    for (int i = 0; i < n_in; i++) {
        char *text = argv[3 + 2 * i];
        for (int a = 0; a < API(input_ndim)(i); a++) {
            dims[i][a] = strtoll(text, &text, 10);
            if (*text == 'x') text++;
        }
        dim_ptrs[i] = dims[i];
    }
    int rc = API(bind_sizes)(dim_ptrs, sizes);
    if (rc != 0) { fprintf(stderr, "bind_sizes: %s\n", API(error_message)(rc)); return 1; }
    for (int i = 0; i < n_in; i++) {
        size_t bytes = itemsize(API(input_dtype)(i));
        for (int a = 0; a < API(input_ndim)(i); a++) bytes *= (size_t)dims[i][a];
        inputs[i] = read_file(argv[4 + 2 * i], bytes);
    }
    for (int i = 0; i < n_out; i++) {
        int64_t od[8];
        API(output_dims)(i, sizes, od);
        out_bytes[i] = itemsize(API(output_dtype)(i));
        for (int a = 0; a < API(output_ndim)(i); a++) out_bytes[i] *= (size_t)od[a];
    }
#define RUN(m) API(run_sized)(m, sizes, inputs, outputs)
#else
    int rc;
    for (int i = 0; i < n_in; i++) inputs[i] = read_file(argv[3 + i], API(input_bytes)(i));
    for (int i = 0; i < n_out; i++) out_bytes[i] = API(output_bytes)(i);
#define RUN(m) API(run)(m, inputs, outputs)
#endif
    for (int i = 0; i < n_out; i++) outputs[i] = malloc(out_bytes[i] + 1);
    CAT(PREFIX, model) *model = NULL;
    rc = API(create)(threads, &model);
    if (rc != 0) { fprintf(stderr, "create: %s\n", API(error_message)(rc)); return 1; }
    rc = RUN(model);
    if (rc != 0) { fprintf(stderr, "run: %s\n", API(error_message)(rc)); return 1; }
    if (repeat > 1) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (int r = 0; r < repeat; r++) RUN(model);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double ms = ((double)(t1.tv_sec - t0.tv_sec) * 1e3 +
                     (double)(t1.tv_nsec - t0.tv_nsec) / 1e6) / repeat;
        printf("%.6f ms per run\n", ms);
    }
    for (int i = 0; i < n_out; i++) {
        FILE *f = fopen(argv[sep + 1 + i], "wb");
        if (!f || fwrite(outputs[i], 1, out_bytes[i], f) != out_bytes[i]) {
            fprintf(stderr, "cannot write %s\n", argv[sep + 1 + i]);
            return 2;
        }
        fclose(f);
    }
    API(destroy)(model);
    return 0;
}
