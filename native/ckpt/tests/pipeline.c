/* The stages of a pipeline for checkpoint tests, run by a shell as
 *
 *     pipeline produce N | pipeline filter | pipeline consume DIR
 *
 * produce writes the numbers 1..N, a line each, pausing 1 ms every 50 lines; filter turns
 * each line "i" into "i i*i"; consume checks that the lines come in order, each once, with
 * the right square, writes "step i" to DIR/out.consumer every 100 lines and ends with
 * "consumer: done N OK" (or a line with BAD and exit 1). Bytes lost or doubled in the pipes,
 * or in the stages' buffers, show as a line out of order. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    char line[256];
    if (strcmp(argv[1], "produce") == 0 && argc > 2) {
        long n = atol(argv[2]);
        for (long i = 1; i <= n; i++) {
            printf("%ld\n", i);
            if (i % 50 == 0) {
                fflush(stdout);
                struct timespec ts = {0, 1000 * 1000};
                nanosleep(&ts, NULL);
            }
        }
        return 0;
    }
    if (strcmp(argv[1], "filter") == 0) {
        while (fgets(line, sizeof line, stdin)) {
            long i = atol(line);
            printf("%ld %ld\n", i, i * i);
        }
        return 0;
    }
    if (strcmp(argv[1], "consume") == 0 && argc > 2) {
        char path[4096];
        snprintf(path, sizeof path, "%s/out.consumer", argv[2]);
        FILE *out = fopen(path, "w");
        if (!out)
            return 2;
        long want = 1;
        while (fgets(line, sizeof line, stdin)) {
            long i = 0, sq = 0;
            if (sscanf(line, "%ld %ld", &i, &sq) != 2 || i != want || sq != i * i) {
                fprintf(out, "consumer: BAD line %s (wanted %ld)\n", line, want);
                fclose(out);
                return 1;
            }
            if (i % 100 == 0) {
                fprintf(out, "step %ld\n", i);
                fflush(out);
            }
            want++;
        }
        fprintf(out, "consumer: done %ld OK\n", want - 1);
        fclose(out);
        return 0;
    }
    return 2;
}
