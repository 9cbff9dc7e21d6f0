#include "common/log.hpp"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>

namespace xtrain {

void init_logging(const std::string& tag, const std::string& file, bool quiet) {
  std::shared_ptr<spdlog::logger> logger;
  if (file.empty()) {
    logger = std::make_shared<spdlog::logger>(tag, std::make_shared<spdlog::sinks::stderr_sink_mt>());
  } else {
    logger = std::make_shared<spdlog::logger>(
        tag, std::make_shared<spdlog::sinks::basic_file_sink_mt>(file, /*truncate=*/false));
  }
  logger->set_pattern(tag.empty() ? "%Y-%m-%d %H:%M:%S.%e %l: %v" : "%Y-%m-%d %H:%M:%S.%e [%n] %l: %v");
  logger->set_level(quiet ? spdlog::level::warn : spdlog::level::info);
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
}

}  // namespace xtrain
