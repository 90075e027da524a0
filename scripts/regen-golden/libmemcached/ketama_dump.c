/*
 * ketama_dump: where libmemcached (libmemcached-dev 1.1) puts each key, without any server running.
 *
 *   ketama_dump MODE HASH HOST:PORT:WEIGHT...  < keys.hex  > golden.tsv
 *
 * MODE: ketama (MEMCACHED_BEHAVIOR_KETAMA), ketama-weighted (MEMCACHED_BEHAVIOR_KETAMA_WEIGHTED),
 *       spy (distribution CONSISTENT_KETAMA_SPY), spy-weighted (KETAMA_WEIGHTED, then SPY),
 *       hashes (no servers: print every libhashkit hash of each key).
 * HASH: "-" for the mode's default key hash, else default, md5, crc, fnv1_64, fnv1a_64, fnv1_32,
 *       fnv1a_32, hsieh, murmur, jenkins, murmur3 (set with MEMCACHED_BEHAVIOR_HASH after the mode,
 *       before the servers are added).
 * Input: one key per line, hex. Output: HEXKEY TAB HOST:PORT (or TAB-separated hashes in "hashes" mode).
 * Written for shardring's golden data; uses only libmemcached's public API.
 */
#include <libmemcached/memcached.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct { const char *name; memcached_hash_t hash; } HASHES[] = {
    {"default", MEMCACHED_HASH_DEFAULT}, {"md5", MEMCACHED_HASH_MD5}, {"crc", MEMCACHED_HASH_CRC},
    {"fnv1_64", MEMCACHED_HASH_FNV1_64}, {"fnv1a_64", MEMCACHED_HASH_FNV1A_64},
    {"fnv1_32", MEMCACHED_HASH_FNV1_32}, {"fnv1a_32", MEMCACHED_HASH_FNV1A_32},
    {"hsieh", MEMCACHED_HASH_HSIEH}, {"murmur", MEMCACHED_HASH_MURMUR},
    {"jenkins", MEMCACHED_HASH_JENKINS}, {"murmur3", MEMCACHED_HASH_MURMUR3},
};
#define NHASHES (sizeof(HASHES) / sizeof(HASHES[0]))

static int unhex(const char *line, char *out, size_t *len) {
    size_t n = strcspn(line, "\r\n");
    if (n % 2) return -1;
    for (size_t i = 0; i < n / 2; i++) {
        unsigned int b;
        if (sscanf(line + 2 * i, "%2x", &b) != 1) return -1;
        out[i] = (char) b;
    }
    *len = n / 2;
    return 0;
}

static void die(const char *what) {
    fprintf(stderr, "ketama_dump: %s\n", what);
    exit(2);
}

int main(int argc, char **argv) {
    if (argc < 3) die("usage: ketama_dump MODE HASH HOST:PORT:WEIGHT...");
    const char *mode = argv[1], *hash = argv[2];
    char line[4096], key[2048];
    size_t len;

    if (strcmp(mode, "hashes") == 0) {
        printf("#key");
        for (size_t h = 0; h < NHASHES; h++) printf("\t%s", HASHES[h].name);
        printf("\n");
        while (fgets(line, sizeof line, stdin)) {
            if (unhex(line, key, &len)) die("bad hex key");
            printf("%.*s", (int) strcspn(line, "\r\n"), line);
            for (size_t h = 0; h < NHASHES; h++)
                printf("\t%08x", memcached_generate_hash_value(key, len, HASHES[h].hash));
            printf("\n");
        }
        return 0;
    }

    memcached_st *memc = memcached_create(NULL);
    if (!memc) die("memcached_create");
    memcached_return_t rc;
    if (strcmp(mode, "ketama") == 0) {
        rc = memcached_behavior_set(memc, MEMCACHED_BEHAVIOR_KETAMA, 1);
    } else if (strcmp(mode, "ketama-weighted") == 0) {
        rc = memcached_behavior_set(memc, MEMCACHED_BEHAVIOR_KETAMA_WEIGHTED, 1);
    } else if (strcmp(mode, "spy") == 0) {
        rc = memcached_behavior_set(memc, MEMCACHED_BEHAVIOR_DISTRIBUTION,
                                    MEMCACHED_DISTRIBUTION_CONSISTENT_KETAMA_SPY);
    } else if (strcmp(mode, "spy-weighted") == 0) {
        rc = memcached_behavior_set(memc, MEMCACHED_BEHAVIOR_KETAMA_WEIGHTED, 1);
        if (rc == MEMCACHED_SUCCESS)
            rc = memcached_behavior_set(memc, MEMCACHED_BEHAVIOR_DISTRIBUTION,
                                        MEMCACHED_DISTRIBUTION_CONSISTENT_KETAMA_SPY);
    } else {
        die("unknown mode");
    }
    if (rc != MEMCACHED_SUCCESS) die("memcached_behavior_set (mode)");
    if (strcmp(hash, "-") != 0) {
        size_t h;
        for (h = 0; h < NHASHES && strcmp(HASHES[h].name, hash) != 0; h++) {}
        if (h == NHASHES) die("unknown hash");
        if (memcached_behavior_set(memc, MEMCACHED_BEHAVIOR_HASH, HASHES[h].hash) != MEMCACHED_SUCCESS)
            die("memcached_behavior_set (hash)");
    }
    /* Servers last: libmemcached builds the continuum when a server is added or the distribution
     * is set, with the key hash set at that moment; a hash set afterwards changes only the keys. */
    for (int i = 3; i < argc; i++) {
        char host[1024];
        unsigned int port, weight;
        char *last = strrchr(argv[i], ':');
        if (!last) die("server must be HOST:PORT:WEIGHT");
        weight = (unsigned int) atoi(last + 1);
        *last = 0;
        char *mid = strrchr(argv[i], ':');
        if (!mid) die("server must be HOST:PORT:WEIGHT");
        port = (unsigned int) atoi(mid + 1);
        *mid = 0;
        snprintf(host, sizeof host, "%s", argv[i]);
        if (memcached_server_add_with_weight(memc, host, (in_port_t) port, weight) != MEMCACHED_SUCCESS)
            die("memcached_server_add_with_weight");
    }
    while (fgets(line, sizeof line, stdin)) {
        if (unhex(line, key, &len)) die("bad hex key");
        uint32_t idx = memcached_generate_hash(memc, key, len);
        const memcached_instance_st *s = memcached_server_instance_by_position(memc, idx);
        if (!s) die("no server");
        printf("%.*s\t%s:%u\n", (int) strcspn(line, "\r\n"), line, memcached_server_name(s),
               (unsigned) memcached_server_port(s));
    }
    memcached_free(memc);
    return 0;
}
