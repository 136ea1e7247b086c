/* classify_digits: the digits CNN, exported by `tessera export`, classifies the test set in C.
 *
 *   make            # exports the model (tessera export) and builds this program
 *   ./classify_digits [THREADS]
 *
 * Reads digits_test_images.f32 (360 images, float32 [1, 1, 8, 8] each, pixels 0..1) and
 * digits_test_labels.u8, runs the model one image at a time (as a service would), prints
 * every prediction, the accuracy and the time per image. No Python is involved. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "digits.h"

#define IMAGES 360

static void *read_all(const char *path, size_t bytes) {
    FILE *f = fopen(path, "rb");
    void *data = malloc(bytes);
    if (!f || !data || fread(data, 1, bytes, f) != bytes) {
        fprintf(stderr, "cannot read %zu bytes from %s\n", bytes, path);
        exit(2);
    }
    fclose(f);
    return data;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    size_t image_bytes = digits_input_bytes(0);
    if (digits_num_inputs() != 1 || image_bytes != 64 * sizeof(float) ||
        digits_output_bytes(0) != 10 * sizeof(float)) {
        fprintf(stderr, "export the model with --input-shapes \"image:[1,1,8,8]\"\n");
        return 2;
    }
    float *images = read_all("digits_test_images.f32", IMAGES * image_bytes);
    unsigned char *labels = read_all("digits_test_labels.u8", IMAGES);

    digits_model *model = NULL;
    int rc = digits_create(threads, &model);
    if (rc != DIGITS_OK) {
        fprintf(stderr, "digits_create: %s\n", digits_error_message(rc));
        return 1;
    }
    float logits[10];
    int correct = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    printf("predictions:");
    for (int i = 0; i < IMAGES; i++) {
        const void *inputs[1] = {images + (size_t)i * 64};
        void *outputs[1] = {logits};
        rc = digits_run(model, inputs, outputs);
        if (rc != DIGITS_OK) {
            fprintf(stderr, "digits_run: %s\n", digits_error_message(rc));
            return 1;
        }
        int best = 0;
        for (int k = 1; k < 10; k++)
            if (logits[k] > logits[best]) best = k;
        correct += best == labels[i];
        printf(" %d", best);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double us = ((double)(t1.tv_sec - t0.tv_sec) * 1e6 +
                 (double)(t1.tv_nsec - t0.tv_nsec) / 1e3) / IMAGES;
    printf("\naccuracy: %d/%d (%.1f%%), %.2f us per image, %d thread(s)\n", correct, IMAGES,
           100.0 * correct / IMAGES, us, threads);
    digits_destroy(model);
    free(images);
    free(labels);
    return 0;
}
