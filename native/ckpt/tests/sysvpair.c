/* A producer and a consumer sharing System V shared memory and semaphores, for checkpoint
 * tests:
 *
 *     sysvpair DIR RECORDS
 *
 * The process makes, in its IPC namespace:
 * - a private segment holding a ring of 64 slots, and a private set of two semaphores
 *   counting the free and the full slots;
 * - a segment with key 0x43524e31, which it fills with a marker and detaches: no process has
 *   it attached while the job runs;
 * - a private segment both processes attach and the producer then removes (IPC_RMID while
 *   attached), where the consumer counts the records it checked.
 * It forks the consumer, which inherits the attachments. The producer writes RECORDS records
 * of 4000 bytes into the ring (semop on the free count, the record, semop on the full
 * count), each with its number and a checksum of bytes that depend on the number, pausing
 * 0.2 ms between records. The consumer takes them in turn, checking every record's number and
 * bytes, writes "step N" to DIR/out.consumer for each and counts it in the removed segment.
 * At the end the consumer checks that both semaphores hold what a drained ring leaves, that
 * the keyed segment is found by its key with the id it had, the same size and its marker, and
 * that the removed segment is still marked removed and still counts every record, then writes
 * "consumer: done OK". The producer collects the consumer and writes "producer: done OK" to
 * DIR/out.producer, after checking the counts once more. A record lost, doubled, reordered
 * or damaged, an id, key, count or marker that changed shows as BAD and exits 1. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "records.h"

#define SLOTS 64
#define KEY 0x43524e31
#define MARK "cairn keyed segment, never attached while the job runs"

/* Semaphores of the set. */
enum { FREE, FULL };

/* semop of `delta` on semaphore `which`, again when a signal (the checkpoint's) cuts it. */
static void op(int sem, int which, int delta, FILE *f)
{
    struct sembuf b = {.sem_num = (unsigned short)which, .sem_op = (short)delta, .sem_flg = 0};
    while (semop(sem, &b, 1) != 0)
        if (errno != EINTR)
            bad(f, "semop failed", which, errno);
}

struct ids {
    int ring, sem, keyed, removed;
};

/* The keyed segment by its key: the id it had, its size, its marker. */
static void check_keyed(const struct ids *ids, FILE *f)
{
    int id = shmget(KEY, 0, 0);
    if (id != ids->keyed)
        bad(f, "the keyed segment's id changed", id, ids->keyed);
    struct shmid_ds ds;
    if (shmctl(id, IPC_STAT, &ds) != 0 || ds.shm_segsz != 8192 || (ds.shm_perm.mode & 0777) != 0640)
        bad(f, "the keyed segment's size or mode changed", (uint64_t)ds.shm_segsz, ds.shm_perm.mode & 0777);
    const char *p = shmat(id, NULL, SHM_RDONLY);
    if (p == (void *)-1 || strcmp(p, MARK) != 0 || p[8191] != 'z')
        bad(f, "the keyed segment lost its marker", 0, 0);
    shmdt(p);
}

static void check_removed(const struct ids *ids, const volatile uint64_t *count, uint64_t want, FILE *f)
{
    struct shmid_ds ds;
    if (shmctl(ids->removed, IPC_STAT, &ds) != 0 || !(ds.shm_perm.mode & SHM_DEST))
        bad(f, "the removed segment is not marked removed", errno, ds.shm_perm.mode);
    if (*count != want)
        bad(f, "the removed segment's count is off", (uint64_t)*count, (uint64_t)want);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: sysvpair DIR RECORDS\n");
        return 2;
    }
    snprintf(dir, sizeof dir, "%s", argv[1]);
    uint64_t records = strtoull(argv[2], NULL, 10);
    struct ids ids;
    ids.ring = shmget(IPC_PRIVATE, SLOTS * sizeof(struct slot), IPC_CREAT | 0600);
    ids.sem = semget(IPC_PRIVATE, 2, IPC_CREAT | 0600);
    ids.keyed = shmget(KEY, 8192, IPC_CREAT | IPC_EXCL | 0640);
    ids.removed = shmget(IPC_PRIVATE, 4096, IPC_CREAT | 0600);
    if (ids.ring < 0 || ids.sem < 0 || ids.keyed < 0 || ids.removed < 0) {
        perror("sysvpair: shmget/semget");
        return 3;
    }
    unsigned short init[2] = {SLOTS, 0};
    union {
        int val;
        struct semid_ds *buf;
        unsigned short *array;
    } arg = {.array = init};
    if (semctl(ids.sem, 0, SETALL, arg) != 0) {
        perror("sysvpair: semctl");
        return 3;
    }
    char *k = shmat(ids.keyed, NULL, 0);
    struct slot *ring = shmat(ids.ring, NULL, 0);
    volatile uint64_t *count = shmat(ids.removed, NULL, 0);
    if (k == (void *)-1 || ring == (void *)-1 || count == (void *)-1) {
        perror("sysvpair: shmat");
        return 3;
    }
    strcpy(k, MARK);
    k[8191] = 'z';
    shmdt(k);
    shmctl(ids.removed, IPC_RMID, NULL);
    pid_t child = fork();
    if (child < 0)
        return 3;
    if (child == 0) {
        FILE *f = out("consumer");
        for (uint64_t seq = 1; seq <= records; seq++) {
            op(ids.sem, FULL, -1, f);
            if (!check(&ring[(seq - 1) % SLOTS], seq))
                bad(f, "a record is wrong", (uint64_t)seq, (uint64_t)ring[(seq - 1) % SLOTS].seq);
            *count += 1;
            op(ids.sem, FREE, 1, f);
            fprintf(f, "step %llu\n", (unsigned long long)seq);
        }
        int free_ = semctl(ids.sem, FREE, GETVAL), full = semctl(ids.sem, FULL, GETVAL);
        if (free_ != SLOTS || full != 0)
            bad(f, "the semaphores do not count a drained ring", free_, full);
        check_keyed(&ids, f);
        check_removed(&ids, count, records, f);
        fprintf(f, "consumer: done OK\n");
        return 0;
    }
    FILE *f = out("producer");
    struct timespec pause = {0, 200000};
    for (uint64_t seq = 1; seq <= records; seq++) {
        op(ids.sem, FREE, -1, f);
        fill(&ring[(seq - 1) % SLOTS], seq);
        op(ids.sem, FULL, 1, f);
        nanosleep(&pause, NULL);
    }
    int st;
    while (waitpid(child, &st, 0) < 0)
        if (errno != EINTR)
            bad(f, "waitpid failed", errno, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        bad(f, "the consumer failed", st, 0);
    check_keyed(&ids, f);
    check_removed(&ids, count, records, f);
    shmctl(ids.keyed, IPC_RMID, NULL);
    shmctl(ids.ring, IPC_RMID, NULL);
    semctl(ids.sem, 0, IPC_RMID);
    fprintf(f, "producer: done OK\n");
    return 0;
}
