//===- IndexingOps.cpp - gather, scatter, top-k and routing op imports ----===//
//
// The ops a router and token dispatch are built from. ScatterND and
// ScatterElements gained `reduction` at 16 (and its max/min values at 18),
// CumSum-14 only more element types; absent attributes keep the old
// behaviour, so every version imports generically.
//
//===----------------------------------------------------------------------===//

#include "compiler/onnx/OpImport.h"

using namespace moec::onnx_import;

void moec::onnx_import::populateIndexingImports(OpImportTable &table) {
  table.onOpGeneric("Gather", {13}, "data, indices");
  table.onOpGeneric("GatherElements", {13}, "data, indices");
  table.onOpGeneric("GatherND", {13}, "data, indices");
  table.onOpGeneric("ScatterND", {13, 16, 18}, "data, indices, updates");
  table.onOpGeneric("ScatterElements", {13, 16, 18}, "data, indices, updates");
  table.onOpGeneric("TopK", {11, 24}, "X, K");
  table.onOpGeneric("ArgMax", {13}, "data");
  table.onOpGeneric("OneHot", {11}, "indices, depth, values");
  table.onOpGeneric("NonZero", {13}, "X");
  table.onOpGeneric("CumSum", {11, 14}, "x, axis");
}
