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
  std::string too_large;
  for (const OpNeed& need : needs) {
    const long limit = backend.supports(need.group) ? backend.max_size(need.group) : 0;
    if (limit > 0 && need.size > limit && too_large.empty())
      too_large = "train.device: the " + backend_name + " backend cannot run " + need.setting + ": its " +
                  need.size_key + " is " + std::to_string(need.size) + ", above the backend's limit of " +
                  std::to_string(limit) + "\ntrain on train.device: cpu, or lower it";
  }
  if (missing.empty() && too_large.empty())
    for (const OpNeed& need : needs)
      if (const std::string why = backend.refusal(need); !why.empty())
        throw Error("train.device: the " + backend_name + " backend cannot run " + need.setting + ": " + why);
  if (missing.empty() && too_large.empty()) return;
  if (missing.empty()) throw Error(too_large);
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
