// Helpers of the importer tests that build ModelProtos by hand.
#pragma once
#include <google/protobuf/message.h>
#include <google/protobuf/unknown_field_set.h>

#include <string>

#include "onnx/onnx_pb.h"

namespace onnxdp::testing {

// A metadata_props entry as a newer ONNX writes it (field 4 of ValueInfoProto, 9 of NodeProto, 16
// of GraphProto), stored as an unknown field, which is how Debian's older ONNX proto reads it.
inline void add_metadata(google::protobuf::Message* msg, int field, const std::string& key, const std::string& value) {
  onnx::StringStringEntryProto e;
  e.set_key(key);
  e.set_value(value);
  msg->GetReflection()->MutableUnknownFields(msg)->AddLengthDelimited(field, e.SerializeAsString());
}

}  // namespace onnxdp::testing
