#pragma once
// The configs in configs/text/ read runs/data/kjv-bpe4096, a data directory that scripts/prepare-text-data.sh makes
// from Debian's bible-kjv (it is not committed: it is generated). Tests that load every shipped config call this
// first; the script skips a complete directory and serialises concurrent callers with a lock, so under ctest -j
// the data is prepared once (about 15 s).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace canonlab::test_support {

inline void ensure_text_presets_data() {
  const std::string cmd = std::string("cd '") + CANONLAB_SOURCE_DIR + "' && scripts/prepare-text-data.sh '" +
                          CANONLAB_BINARY + "' > /dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "scripts/prepare-text-data.sh failed (is bible-kjv installed? "
                                            "scripts/install-deps.sh); run it by hand to see why";
}

}  // namespace canonlab::test_support
