// Turns a ticket for a whole QueryResult into a ticket for one of its members.
#pragma once

#include <memory>
#include <utility>

#include "core/backend.hpp"

namespace streamknn::detail {

template <class Out>
Ticket<Out> map_ticket(Ticket<QueryResult> inner, Out QueryResult::*member) {
  auto shared = std::make_shared<Ticket<QueryResult>>(std::move(inner));
  return Ticket<Out>([shared] { return shared->ready(); },
                     [shared, member] { return std::move(shared->get().*member); });
}

}  // namespace streamknn::detail
