// mini_train --log-json's records (see json_log.h, Note [Log records]).
#include "apps/mini_train/json_log.h"

#include <nlohmann/json.hpp>
#include <sstream>

#include "tensor/check.h"
#include "tensor/output_file.h"

namespace mt::app {

namespace {

// Whether a record of an earlier run survives a resume from (completed_epochs, step): a step record
// up to the checkpoint's step, another record up to its last whole epoch. Lines that are not
// records (a line cut short by a crash) go.
bool kept_on_resume(const std::string& line, int64_t completed_epochs, int64_t step) {
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("epoch") || !j["epoch"].is_number_integer()) return false;
  if (j.value("type", "") == "step")
    return j.contains("step") && j["step"].is_number_integer() && j["step"].get<int64_t>() <= step;
  return j["epoch"].get<int64_t>() <= completed_epochs;
}

// Keeps what kept_on_resume keeps; rewritten atomically, so a crash here leaves the old log whole.
void trim(const std::string& path, int64_t completed_epochs, int64_t step) {
  std::ifstream in(path);
  if (!in) return;  // no log yet: nothing to trim
  std::ostringstream kept;
  bool dropped = false;
  for (std::string line; std::getline(in, line);) {
    if (kept_on_resume(line, completed_epochs, step)) kept << line << '\n';
    else dropped = true;
  }
  in.close();
  if (dropped) write_file_atomically(path, kept.str(), "--log-json");
}

}  // namespace

void JsonLog::open(const std::string& path, bool resumed, int64_t completed_epochs, int64_t step) {
  if (resumed) trim(path, completed_epochs, step);
  // A log grows line by line, so it is not replaced atomically like the other outputs; it is
  // opened where a symlink leads, and a device was refused up front (Note [Output files]).
  out_.open(resolve_output_path(path, "--log-json"), resumed ? std::ios::app : std::ios::trunc);
  MT_CHECK(out_.good(), "--log-json ", path, ": cannot open for writing");
}

void JsonLog::write(const StepRecord& r) {
  line(nlohmann::json{{"type", "step"}, {"epoch", r.epoch}, {"step", r.step}, {"loss", r.loss}, {"lr", r.lr},
                      {"samples_per_s", r.samples_per_s}}.dump());
}

void JsonLog::write(const EpochRecord& r) {
  line(nlohmann::json{{"type", "epoch"}, {"epoch", r.epoch}, {"step", r.step}, {"loss", r.loss},
                      {"samples_per_s", r.samples_per_s}, {"seconds", r.seconds}, {"lr", r.lr}}.dump());
}

void JsonLog::write(const EvalRecord& r) {
  line(nlohmann::json{{"type", "eval"}, {"epoch", r.epoch}, {"step", r.step}, {"split", r.split},
                      {"metric", r.metric}, {"value", r.value}, {"seconds", r.seconds}}.dump());
}

// Flushed per record: a log read while the run goes on (or after a kill) ends in a whole line.
void JsonLog::line(const std::string& json) { out_ << json << '\n' << std::flush; }

}  // namespace mt::app
