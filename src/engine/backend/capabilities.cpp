#include "engine/backend/capabilities.h"

#include <algorithm>

#include "engine/error.h"

namespace canonlab {

void check_supported(const BackendCapabilities& backend, const std::string& backend_name,
                     const std::vector<OpNeed>& needs) {
  std::vector<OpGroup> missing;
  for (const OpNeed& need : needs)
    if (!backend.supports(need.group) && std::ranges::find(missing, need.group) == missing.end())
      missing.push_back(need.group);
  if (missing.empty()) return;
  std::string message = "train.device: the " + backend_name + " backend cannot run this model:";
  for (OpGroup group : missing) {
    message += "\n  " + std::string(op_group_name(group)) + ", needed by ";
    int shown = 0, more = 0;
    for (const OpNeed& need : needs) {
      if (need.group != group) continue;
      if (shown < 3) message += (shown++ ? ", " : "") + need.setting;
      else more++;
    }
    if (more > 0) message += " and " + std::to_string(more) + " more";
  }
  message += "\ntrain on train.device: cpu, or change the settings named above";
  throw Error(message);
}

}  // namespace canonlab
