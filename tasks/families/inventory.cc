// Total the stock of one item in one warehouse from a long inventory file:
// three tool calls (look at the file, pick the rows, add them up). The file is
// the longest tool output of all families, so these trajectories are the ones
// that teach the default models to work past 1,024 tokens of context, and its
// item and city names give the tokenizer a real vocabulary to learn.
#include <string>
#include <vector>

#include "tasks/families/families.h"
#include "tasks/rng.h"

namespace flashroll::families {
namespace {

const std::vector<std::string>& Items() {
  static const std::vector<std::string> items = {
      "hammer", "wrench", "screwdriver", "pliers", "chisel", "saw", "drill", "ladder", "shovel", "rake",
      "bucket", "hose", "lantern", "flashlight", "battery", "cable", "adapter", "router", "monitor", "keyboard",
      "mouse", "printer", "scanner", "speaker", "headphones", "microphone", "camera", "tripod", "projector",
      "whiteboard", "marker", "pencil", "eraser", "notebook", "envelope", "stapler", "scissors", "tape", "glue",
      "folder", "binder", "calendar", "backpack", "suitcase", "umbrella", "blanket", "pillow", "mattress",
      "towel", "curtain", "carpet", "mirror", "candle", "vase", "teapot", "kettle", "toaster", "blender",
      "mixer", "oven", "freezer", "dishwasher", "sponge", "detergent", "soap", "shampoo", "toothbrush", "comb",
      "jacket", "sweater", "scarf", "gloves", "boots", "sandals", "sneakers", "helmet", "bicycle", "scooter",
      "skateboard", "kayak", "paddle", "tent", "hammock", "compass", "binoculars", "thermos", "canteen",
      "rope", "carabiner", "harness", "anchor", "bolt", "washer", "hinge", "padlock", "chain", "spring",
      "valve", "pump", "filter", "faucet", "pipe", "bracket", "shelf", "cabinet", "drawer", "table", "chair",
      "stool", "bench", "desk", "lamp", "fan", "heater", "radiator", "thermostat", "sensor", "switch", "socket",
      "plug", "fuse", "transformer", "generator", "motor", "gearbox", "bearing", "pulley", "belt", "wheel",
      "tire", "axle", "brake", "clutch", "wiper", "antenna", "trumpet", "violin", "guitar", "piano",
      "drum", "flute", "clarinet", "banjo", "harmonica", "accordion", "apple", "banana", "cherry", "grape",
      "lemon", "mango", "melon", "orange", "peach", "pear", "plum", "apricot", "coconut", "pineapple",
      "strawberry", "raspberry", "blueberry", "walnut", "almond", "peanut", "cashew", "hazelnut", "pistachio",
      "rice", "wheat", "barley", "oats", "flour", "sugar", "salt", "pepper", "cinnamon", "ginger", "garlic",
      "onion", "potato", "carrot", "cabbage", "lettuce", "spinach", "broccoli", "tomato", "cucumber", "pumpkin",
      "coffee", "tea", "cocoa", "honey", "butter", "cheese", "yogurt", "bread", "pasta", "noodles", "cereal",
      "biscuit", "chocolate", "jam", "vinegar", "olive", "mustard", "ketchup", "paint", "brush", "roller",
      "varnish", "cement", "brick", "tile", "plank", "plywood", "nail", "screw", "rivet", "gasket", "magnet",
      "crystal", "marble", "granite", "copper", "silver", "bronze", "nickel", "zinc", "aluminum", "titanium"};
  return items;
}

const std::vector<std::string>& Cities() {
  static const std::vector<std::string> cities = {
      "Oslo", "Bergen", "Stockholm", "Uppsala", "Helsinki", "Tampere", "Copenhagen", "Aarhus", "Reykjavik",
      "Dublin", "Cork", "London", "Leeds", "Glasgow", "Edinburgh", "Cardiff", "Paris", "Lyon", "Marseille",
      "Bordeaux", "Lille", "Nantes", "Brussels", "Antwerp", "Amsterdam", "Rotterdam", "Utrecht", "Berlin",
      "Hamburg", "Munich", "Cologne", "Dresden", "Leipzig", "Vienna", "Graz", "Zurich", "Geneva", "Basel",
      "Milan", "Turin", "Genoa", "Venice", "Florence", "Bologna", "Naples", "Rome", "Madrid", "Seville",
      "Valencia", "Bilbao", "Lisbon", "Porto", "Warsaw", "Krakow", "Gdansk", "Prague", "Brno", "Budapest",
      "Bratislava", "Ljubljana", "Zagreb", "Belgrade", "Sofia", "Bucharest", "Athens", "Istanbul", "Ankara",
      "Cairo", "Nairobi", "Lagos", "Accra", "Dakar", "Casablanca", "Tunis", "Toronto", "Montreal", "Vancouver",
      "Chicago", "Boston", "Denver", "Seattle", "Houston", "Phoenix", "Atlanta", "Miami", "Portland",
      "Monterrey", "Lima", "Bogota", "Santiago", "Quito", "Caracas", "Tokyo", "Osaka", "Kyoto", "Seoul",
      "Busan", "Beijing", "Shanghai", "Shenzhen", "Taipei", "Manila", "Hanoi", "Bangkok", "Jakarta",
      "Singapore", "Delhi", "Mumbai", "Chennai", "Karachi", "Dhaka", "Tehran", "Baghdad", "Dubai", "Doha",
      "Sydney", "Melbourne", "Perth", "Brisbane", "Auckland", "Wellington"};
  return cities;
}

struct Row {
  std::string item, city;
  int count;
};

class InventoryFamily : public TaskFamily {
 public:
  const char* name() const override { return "inventory"; }
  const char* summary() const override { return "total one item's stock in one warehouse from a long file (3 tool calls)"; }

  Task Generate(uint64_t seed, int difficulty) const override {
    TaskRng rng(seed * 49979687 + static_cast<uint64_t>(difficulty));
    const std::string item = rng.Pick(Items());
    const std::string city = rng.Pick(Cities());
    const int lines = static_cast<int>(rng.Int(6 * difficulty, 20 * difficulty + 10));
    // Beyond the demonstrated range the task asks for the item across every
    // warehouse: the demonstrated item-and-city filter then undercounts.
    const bool all_cities = difficulty > kDemonstrationMaxDifficulty;
    const int matches = static_cast<int>(rng.Int(1, 1 + difficulty / 2));

    std::vector<Row> rows;
    for (int i = 0; i < lines; ++i) {
      Row row{rng.Pick(Items()), rng.Pick(Cities()), static_cast<int>(rng.Int(0, 500))};
      // Other rows may share the item or the city, never both (unless the
      // task counts every city, where rows of the item are what it is about).
      if (row.item == item && (row.city == city || all_cities)) row.item = item == "hammer" ? "wrench" : "hammer";
      rows.push_back(row);
    }
    for (int m = 0; m < matches; ++m) {
      Row row{item, all_cities ? rng.Pick(Cities()) : city, static_cast<int>(rng.Int(1, 500))};
      rows.insert(rows.begin() + rng.Int(0, static_cast<int64_t>(rows.size())), row);
    }
    long long total = 0;
    std::string contents;
    for (const Row& row : rows) {
      if (row.item == item && (all_cities || row.city == city)) total += row.count;
      contents += row.item + "," + row.city + "," + std::to_string(row.count) + "\n";
    }
    const std::string file = rng.Pick<std::string>({"inventory.csv", "stock.csv", "warehouse.csv"});

    Task task;
    task.family = name();
    task.id = TaskId(name(), seed, difficulty);
    task.difficulty = difficulty;
    task.files = {{file, contents}};
    task.prompt = "The file " + file + " lists stock as rows of item,warehouse,count. " +
                  (all_cities ? "How many units of " + item + " are in stock across all warehouses together?"
                              : "How many units of " + item + " are in stock in the " + city + " warehouse?") +
                  " Give the total as your final answer.";
    task.answer = std::to_string(total);
    return task;
  }

  SolutionStep NextStep(const Task& task, const std::vector<std::string>& outputs) const override {
    const std::string& file = task.files.front().path;
    const std::string pattern = Pattern(task);
    if (outputs.empty()) return {"I read " + file + " first to see how its rows look.", "cat " + file};
    if (outputs.size() == 1) {
      return {"The rows are item,warehouse,count with no header. I pick out the rows that match.",
              "grep '^" + pattern + "' " + file};
    }
    if (outputs.size() == 2) {
      return {"Now I add up the third column of those rows with awk.",
              "grep '^" + pattern + "' " + file + " | awk -F, '{s += $3} END {print s}'"};
    }
    return {};
  }

  std::string FinalAnswer(const Task&, const std::vector<std::string>& outputs) const override {
    if (outputs.size() < 3) return "";
    std::string total = outputs.back();
    while (!total.empty() && (total.back() == '\n' || total.back() == ' ')) total.pop_back();
    return total;
  }

 private:
  // The demonstrated filter: item and city from the prompt ("item,City,").
  static std::string Pattern(const Task& task) {
    const std::string& p = task.prompt;
    const size_t of = p.find("units of ") + 9;
    const std::string item = p.substr(of, p.find(' ', of) - of);
    const size_t in = p.find(" in the ");
    if (in == std::string::npos) return item + ",";
    const size_t start = in + 8;
    return item + "," + p.substr(start, p.find(' ', start) - start) + ",";
  }
};

}  // namespace

const TaskFamily& Inventory() {
  static const InventoryFamily family;
  return family;
}

}  // namespace flashroll::families
