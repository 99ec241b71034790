// The status page's files (server/status_page/*.html, *.js, *.css),
// embedded in the binary at build time by server/status_page/embed.sh (the
// genrule :status_page_assets_cc), so the coordinator serves its page with
// no files on disk and the page needs no network beyond the coordinator.
#ifndef LOCKSTEP_SERVER_STATUS_PAGE_ASSETS_H_
#define LOCKSTEP_SERVER_STATUS_PAGE_ASSETS_H_

#include <cstddef>

namespace lockstep {

struct EmbeddedAsset {
  const char* name;  // file name, e.g. "app.js"
  const char* data;  // the file's bytes (text; no NUL)
  size_t size;
};

extern const EmbeddedAsset kStatusPageAssets[];
extern const size_t kStatusPageAssetCount;

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_STATUS_PAGE_ASSETS_H_
