// What walsh-inspect prints about an accepted model file.
#ifndef WALSH_TOOLS_INSPECT_MODEL_SUMMARY_H_
#define WALSH_TOOLS_INSPECT_MODEL_SUMMARY_H_

#include <string>

#include "worker/model/model_file.h"

namespace walsh {

std::string ModelSummaryText(const ModelFile& model);
std::string ModelSummaryJson(const ModelFile& model);

}  // namespace walsh

#endif  // WALSH_TOOLS_INSPECT_MODEL_SUMMARY_H_
