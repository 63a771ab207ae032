/* fuzz_oci.c - libFuzzer target: the OCI / Docker image document parsers and the image
 * reference parser (src/sandbox/storage/oci.c) on hostile bytes. Invariants: no crash,
 * no leak, a parsed document's digests are well-formed and its counts within the caps,
 * a parsed reference is canonical (parsing its canonical form gives it back). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sandbox/storage/oci.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *b = (const char *)data;
    struct err e = ERR_INIT;
    struct sbx_oci_index ix;
    if (sbx_oci_parse_index(b, size, "index", &ix, &e) == 0) {
        if (ix.n > SBX_OCI_INDEX_MAX) abort();
        for (size_t i = 0; i < ix.n; i++)
            if (!sbx_oci_digest_ok(ix.manifests[i].digest)) abort();
        sbx_oci_select(&ix, "linux", "amd64", &e);
        sbx_oci_index_fini(&ix);
    }
    struct sbx_oci_manifest m;
    if (sbx_oci_parse_manifest(b, size, "manifest", &m, &e) == 0) {
        if (m.nlayers > SBX_OCI_LAYERS_MAX || !sbx_oci_digest_ok(m.config.digest)) abort();
        sbx_oci_manifest_fini(&m);
    }
    struct sbx_oci_config c;
    if (sbx_oci_parse_config(b, size, "config", &c, &e) == 0) sbx_oci_config_fini(&c);
    sbx_oci_doc_kind(b, size);
    if (size < 600) {
        char s[600];
        memcpy(s, data, size);
        s[size] = '\0';
        struct sbx_oci_ref r, r2;
        if (strlen(s) == size && sbx_oci_ref_parse(s, &r, &e) == 0) {
            if (sbx_oci_ref_parse(r.canonical, &r2, &e) != 0) abort();
            if (strcmp(r.canonical, r2.canonical) != 0) abort();
        }
    }
    return 0;
}
