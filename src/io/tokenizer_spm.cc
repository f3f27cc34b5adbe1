/*
 * tokenizer_spm.cc - libsentencepiece behind the C functions of
 * tokenizer_spm.h. Kept to the calls the C side needs: load, encode,
 * decode, train. Every C++ exception and every SentencePiece status becomes
 * a gt status with a message (gt_error_set).
 */
#include "tokenizer_spm.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

extern "C" {
#include "gridtrain/error.h"
}

namespace spm = sentencepiece;

struct gt_spm {
  spm::SentencePieceProcessor proc;
};

#define GT_SPM_ERROR(code, ...) gt_error_set((code), __FILE__, __LINE__, __func__, __VA_ARGS__)

// ---- messages ---------------------------------------------------------------------------

/* SentencePiece's message without its "src/file.cc(123) [expression] "
 * prefix when a sentence follows it; the two failed checks a user meets
 * in words. */
static std::string gt_spm_reason(const spm::util::Status &s)
{
  std::string msg = s.error_message() ? s.error_message() : "";
  if (msg.find("ParseFromArray") != std::string::npos)
    return "they do not parse as its ModelProto";
  if (msg.find("!sentences_.empty()") != std::string::npos)
    return "no text to train on";
  const size_t close = msg.find("] ");
  if (msg.find(".cc(") != std::string::npos && close != std::string::npos &&
      close + 2 < msg.size())
    msg = msg.substr(close + 2);
  while (!msg.empty() && (msg.back() == ' ' || msg.back() == '\n' || msg.back() == '.'))
    msg.pop_back();
  return msg.empty() ? std::string("unknown error") : msg;
}

/* The status of a caught exception. */
static int gt_spm_caught(const char *func)
{
  try {
    throw;
  } catch (const std::bad_alloc &) {
    return gt_error_set(GT_ERR_SYSTEM, __FILE__, __LINE__, func,
                        "out of memory inside SentencePiece");
  } catch (const std::exception &e) {
    return gt_error_set(GT_ERR_INTERNAL, __FILE__, __LINE__, func,
                        "SentencePiece threw an exception: %s", e.what());
  } catch (...) {
    return gt_error_set(GT_ERR_INTERNAL, __FILE__, __LINE__, func,
                        "SentencePiece threw an unknown exception");
  }
}

// ---- load, encode, decode ------------------------------------------------------------

extern "C" int gt_spm_load(const void *model, size_t size, gt_spm **out, int *vocab)
{
  *out = nullptr;
  *vocab = 0;
  gt_spm *p = nullptr;
  try {
    p = new gt_spm;
    const auto st = p->proc.LoadFromSerializedProto(
        absl::string_view(static_cast<const char *>(model), size));
    if (!st.ok()) {
      delete p;
      return GT_SPM_ERROR(GT_ERR_INPUT,
                          "the %zu bytes given are not a SentencePiece model (%s); give "
                          "a .model file written by SentencePiece",
                          size, gt_spm_reason(st).c_str());
    }
    *vocab = p->proc.GetPieceSize();
  } catch (...) {
    delete p;
    return gt_spm_caught(__func__);
  }
  *out = p;
  return GT_SUCCESS;
}

extern "C" int gt_spm_encode(gt_spm *spm_, const char *text, size_t len, uint32_t **ids,
                             size_t *n)
{
  *ids = nullptr;
  *n = 0;
  try {
    std::vector<int> v;
    const auto st = spm_->proc.Encode(absl::string_view(text, len), &v);
    if (!st.ok())
      return GT_SPM_ERROR(GT_ERR_INPUT, "SentencePiece cannot encode the text: %s",
                          gt_spm_reason(st).c_str());
    if (v.empty())
      return GT_SUCCESS;
    uint32_t *out = static_cast<uint32_t *>(malloc(v.size() * sizeof *out));
    if (!out)
      return GT_SPM_ERROR(GT_ERR_SYSTEM, "out of memory allocating %zu bytes",
                          v.size() * sizeof *out);
    for (size_t i = 0; i < v.size(); i++)
      out[i] = static_cast<uint32_t>(v[i]);
    *ids = out;
    *n = v.size();
  } catch (...) {
    return gt_spm_caught(__func__);
  }
  return GT_SUCCESS;
}

extern "C" int gt_spm_decode(gt_spm *spm_, const uint32_t *ids, size_t n, char **text,
                             size_t *len)
{
  *text = nullptr;
  *len = 0;
  try {
    std::vector<int> v(ids, ids + n);
    std::string s;
    const auto st = spm_->proc.Decode(v, &s);
    if (!st.ok())
      return GT_SPM_ERROR(GT_ERR_INPUT, "SentencePiece cannot decode the ids: %s",
                          gt_spm_reason(st).c_str());
    char *out = static_cast<char *>(malloc(s.size() + 1));
    if (!out)
      return GT_SPM_ERROR(GT_ERR_SYSTEM, "out of memory allocating %zu bytes", s.size() + 1);
    memcpy(out, s.data(), s.size());
    out[s.size()] = '\0';
    *text = out;
    *len = s.size();
  } catch (...) {
    return gt_spm_caught(__func__);
  }
  return GT_SUCCESS;
}

extern "C" void gt_spm_free(gt_spm *spm_)
{
  delete spm_;
}

// ---- training ---------------------------------------------------------------------------

namespace {

/* SentencePiece's view of the C callback. */
class gt_spm_lines : public spm::SentenceIterator {
 public:
  gt_spm_lines(gt_spm_next_fn next, void *ctx) : next_(next), ctx_(ctx) { Next(); }
  bool done() const override { return done_; }
  void Next() override
  {
    const char *line = nullptr;
    size_t len = 0;
    int end = 0;
    status_code_ = next_(ctx_, &line, &len, &end);
    if (status_code_ != GT_SUCCESS || end) {
      done_ = true;
      value_.clear();
      return;
    }
    value_.assign(line, len);
  }
  const std::string &value() const override { return value_; }
  spm::util::Status status() const override
  {
    return status_code_ == GT_SUCCESS
               ? spm::util::Status()
               : spm::util::Status(spm::util::StatusCode::kCancelled, "reading the text failed");
  }
  int status_code() const { return status_code_; }

 private:
  gt_spm_next_fn next_;
  void *ctx_;
  std::string value_;
  bool done_ = false;
  int status_code_ = GT_SUCCESS;
};

} // namespace

extern "C" int gt_spm_train(const char *type, int vocab, long long max_sentences,
                            int max_sentence_bytes, gt_spm_next_fn next, void *ctx,
                            void **model, size_t *size)
{
  *model = nullptr;
  *size = 0;
  try {
    const std::unordered_map<std::string, std::string> args = {
        {"model_type", type},
        {"vocab_size", std::to_string(vocab)},
        {"byte_fallback", "true"},
        {"normalization_rule_name", "identity"},
        {"add_dummy_prefix", "false"},
        {"remove_extra_whitespaces", "false"},
        {"input_sentence_size", std::to_string(max_sentences)},
        {"shuffle_input_sentence", "true"},
        {"max_sentence_length", std::to_string(max_sentence_bytes)},
        {"num_threads", "1"}, /* unigram's sums differ with the thread count */
        {"minloglevel", "2"}, /* errors come back as the status */
    };
    gt_spm_lines lines(next, ctx);
    std::string out;
    const auto st = spm::SentencePieceTrainer::Train(args, &lines, &out);
    if (lines.status_code() != GT_SUCCESS) /* the callback's error, as it was */
      return gt_error_push(lines.status_code(), __FILE__, __LINE__, __func__);
    if (!st.ok())
      return GT_SPM_ERROR(GT_ERR_INPUT, "SentencePiece cannot train a %s model of %d pieces: %s",
                          type, vocab, gt_spm_reason(st).c_str());
    void *buf = malloc(out.size());
    if (!buf)
      return GT_SPM_ERROR(GT_ERR_SYSTEM, "out of memory allocating %zu bytes", out.size());
    memcpy(buf, out.data(), out.size());
    *model = buf;
    *size = out.size();
  } catch (...) {
    return gt_spm_caught(__func__);
  }
  return GT_SUCCESS;
}
