/* run_model: runs an exported Tessera model on raw input files and writes raw outputs.
 *
 *   cc -O2 -DPREFIX=model -DHEADER='"model.h"' -I DIR run_model.c -L DIR -lmodel -o run_model
 *   ./run_model THREADS REPEAT in0.bin [in1.bin ...] -- out0.bin [out1.bin ...]
 *
 * Each file holds a tensor's bytes, C-contiguous, in the dtype and shape the header lists.
 * REPEAT > 1 runs the model that many times and prints the mean time per run (ms). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include HEADER

#define CAT2(a, b) a##_##b
#define CAT(a, b) CAT2(a, b)
#define API(name) CAT(PREFIX, name)

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

int main(int argc, char **argv) {
    int n_in = API(num_inputs)(), n_out = API(num_outputs)();
    if (argc != 3 + n_in + 1 + n_out || strcmp(argv[3 + n_in], "--") != 0) {
        fprintf(stderr, "usage: %s THREADS REPEAT", argv[0]);
        for (int i = 0; i < n_in; i++) fprintf(stderr, " %s.bin", API(input_name)(i));
        fprintf(stderr, " --");
        for (int i = 0; i < n_out; i++) fprintf(stderr, " %s.bin", API(output_name)(i));
        fprintf(stderr, "\n");
        return 2;
    }
    int threads = atoi(argv[1]), repeat = atoi(argv[2]);
    const void **inputs = calloc((size_t)n_in + 1, sizeof *inputs);
    void **outputs = calloc((size_t)n_out + 1, sizeof *outputs);
    for (int i = 0; i < n_in; i++) inputs[i] = read_file(argv[3 + i], API(input_bytes)(i));
    for (int i = 0; i < n_out; i++) outputs[i] = malloc(API(output_bytes)(i) + 1);
    CAT(PREFIX, model) *model = NULL;
    int rc = API(create)(threads, &model);
    if (rc != 0) { fprintf(stderr, "create: %s\n", API(error_message)(rc)); return 1; }
    rc = API(run)(model, inputs, outputs);
    if (rc != 0) { fprintf(stderr, "run: %s\n", API(error_message)(rc)); return 1; }
    if (repeat > 1) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (int r = 0; r < repeat; r++) API(run)(model, inputs, outputs);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double ms = ((double)(t1.tv_sec - t0.tv_sec) * 1e3 +
                     (double)(t1.tv_nsec - t0.tv_nsec) / 1e6) / repeat;
        printf("%.6f ms per run\n", ms);
    }
    for (int i = 0; i < n_out; i++) {
        FILE *f = fopen(argv[4 + n_in + i], "wb");
        if (!f || fwrite(outputs[i], 1, API(output_bytes)(i), f) != API(output_bytes)(i)) {
            fprintf(stderr, "cannot write %s\n", argv[4 + n_in + i]);
            return 2;
        }
        fclose(f);
    }
    API(destroy)(model);
    return 0;
}
